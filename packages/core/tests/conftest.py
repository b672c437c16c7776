"""Shared fixtures for the core tests: tiny checkpoints and an inline format plugin."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import flexq
from flexq.formatkit import ops_for

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Names, sizes and mtimes of everything in ``directory`` (to prove nothing changed)."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
    }


class ScaledFormat:
    """An inline format: ``X.q`` (I8) times scalar ``X.s`` (F32) makes logical ``X``."""

    FORMAT_NAME = "scaled"
    __version__ = "9.9"

    @flexq.hookimpl
    def flexq_logical_metadata(
        self, checkpoint: flexq.Checkpoint
    ) -> dict[str, flexq.LogicalTensor]:
        return {
            k[:-2]: flexq.LogicalTensor(i.shape, "float32")
            for k, i in checkpoint.tensors.items()
            if k.endswith(".q") and k[:-2] + ".s" in checkpoint.tensors
        }

    @flexq.hookimpl
    def flexq_recognized_keys(self, checkpoint: flexq.Checkpoint) -> list[str]:
        return [k for k in checkpoint.tensors if k.endswith(".s")]

    @flexq.hookimpl
    def flexq_source_keys(self, logical_key: str) -> list[str]:
        return [logical_key + ".q", logical_key + ".s"]

    @flexq.hookimpl
    def flexq_read_plan(self, logical_key: str, target: flexq.TargetSlice) -> flexq.ReadPlan:
        return flexq.ReadPlan(
            "local", {logical_key + ".q": target.box, logical_key + ".s": ((), ())}, target
        )

    @flexq.hookimpl
    def flexq_apply(self, logical_key: str, sources: Mapping[str, Any]) -> Any:
        q, s = sources[logical_key + ".q"], sources[logical_key + ".s"]
        ops = ops_for(q)
        return ops.float32(q, "I8") * ops.float32(s, "F32")


@pytest.fixture
def scaled_format() -> Iterator[ScaledFormat]:
    plugin = ScaledFormat()
    flexq.register_format(plugin)
    try:
        yield plugin
    finally:
        flexq.unregister_format("scaled")


@pytest.fixture
def scaled_ckpt(tmp_path: Path) -> Path:
    """A checkpoint with one scaled tensor ``a`` (in shard 1) and a BF16 passthrough ``norm``."""
    q = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    return flexq.save_checkpoint(
        tmp_path / "ckpt",
        {
            "a.q": flexq.RawTensor.of(q),
            "a.s": flexq.RawTensor.of(np.array(0.5, dtype=np.float32)),
            "norm": flexq.RawTensor("BF16", np.array([0x3F80, 0xC000], dtype=np.uint16)),
        },
        config={"architectures": ["Toy"]},
        shard_of={"a.s": 1},
    )
