"""Fixtures for the cross-package tests: quantized checkpoints of a tiny model in every format."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import flexq
from flexq.formatkit.rounding import float32_to_bfloat16_bits

if TYPE_CHECKING:
    from flexq.formatkit import Format

HERE = Path(__file__).parent
EXAMPLE = HERE / "plugins" / "flexq-format-int8row" / "src" / "flexq_int8row" / "__init__.py"

#: HF-layout [out, in] linear weights of a tiny model (hidden 64, 2 heads of 32, ffn 96).
LINEARS = {
    "model.layers.0.self_attn.q_proj.weight": (64, 64),
    "model.layers.0.self_attn.k_proj.weight": (64, 64),
    "model.layers.0.self_attn.v_proj.weight": (64, 64),
    "model.layers.0.mlp.gate_proj.weight": (96, 64),
    "model.layers.0.mlp.up_proj.weight": (96, 64),
    "model.layers.0.mlp.down_proj.weight": (64, 96),
}
NORM = "model.norm.weight"


def import_source(name: str, path: Path) -> ModuleType:
    """Import a plugin module from a source file (once), without installing it."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def example_module() -> ModuleType:
    """The plugin-guide example format's module, imported from its source tree."""
    return import_source("flexq_int8row", EXAMPLE)


def example_plugin() -> Format[Any]:
    """The plugin-guide example format: its one :class:`flexq.formatkit.Format` object."""
    plugin: Format[Any] = example_module().plugin
    return plugin


@pytest.fixture
def int8row() -> Iterator[str]:
    """The example int8row format registered at run time."""
    name = flexq.register_format(example_plugin())
    try:
        yield name
    finally:
        flexq.unregister_format(name)


@dataclass
class CountedPlans:
    """A registered int8row format whose plan records every box it is asked for, over a
    checkpoint of one 8x8 linear (logical ``lin.weight``, scales ``lin.weight_qscale``)."""

    name: str
    path: Path
    #: every box the format's plan was asked for, in order.
    asked: list[flexq.TargetSlice] = field(default_factory=list)


@pytest.fixture
def counted_plans(tmp_path: Path) -> Iterator[CountedPlans]:
    """The example format as an inline :class:`flexq.formatkit.Format` that counts its
    plans (to prove a load or a forced global plan asks a format once)."""
    from flexq.formatkit import Format

    example = example_module()
    q = np.arange(-32, 32, dtype=np.int8).reshape(8, 8)
    s = np.linspace(0.5, 4, 8, dtype=np.float32)
    path = flexq.save_checkpoint(
        tmp_path / "counted",
        {"lin.weight_q": flexq.RawTensor.of(q), "lin.weight_qscale": flexq.RawTensor.of(s)},
    )
    counted = CountedPlans("int8row", path)

    def counted_plan(layout: Any, target: flexq.TargetSlice) -> flexq.ReadPlan | None:
        counted.asked.append(target)
        plan: flexq.ReadPlan | None = example.local_plan(layout, target)
        return plan

    counting: Format[Any] = Format(
        "int8row", "int8row, its plans counted", methods=(example.METHOD,),
        analyze=example.analyze, plan=counted_plan, decode=example.decode,
    )  # fmt: skip
    counted.name = flexq.register_format(counting)
    try:
        yield counted
    finally:
        flexq.unregister_format(counted.name)


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float32) * 0.05 for k, s in LINEARS.items()}


def assert_loaded_as_composed(sd: dict[str, Any], path: Path) -> None:
    """Every target in ``sd`` holds what ``flexq.compose(path)`` decodes for its key, as
    float32: a load (however it read and decoded) gave the reference values."""
    ct = flexq.compose(path)
    for key, t in sd.items():
        np.testing.assert_array_equal(t.numpy(), ct.load(key, "float32"), err_msg=key)


def int8row_tensors(w: dict[str, np.ndarray]) -> dict[str, flexq.RawTensor]:
    out: dict[str, flexq.RawTensor] = {}
    for key, value in w.items():
        base = key.removesuffix(".weight")
        scale = (np.abs(value).max(axis=1) / 127).astype(np.float32)
        q = np.clip(np.rint(value / scale[:, None]), -127, 127).astype(np.int8)
        out[base + ".weight_q"] = flexq.RawTensor.of(q)
        out[base + ".weight_qscale"] = flexq.RawTensor.of(scale)
    return out


def installed_formats() -> list[str]:
    """Working installed formats that can encode, plus the example format."""
    reg = flexq.plugin.manager.registry
    names = [n for n in reg.active() if reg.implements(n, "flexq_encode")]
    return [*names, "int8row"]


def norm_tensor() -> flexq.RawTensor:
    norm = np.linspace(0.5, 1.5, 64, dtype=np.float32)
    return flexq.RawTensor("BF16", float32_to_bfloat16_bits(norm))


@pytest.fixture(params=installed_formats())
def format_ckpt(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(format name, checkpoint) of the tiny model in each format, written by its encoder."""
    name: str = request.param
    if name == "int8row":
        flexq.register_format(example_plugin())
    try:
        path = tmp_path / name
        path.mkdir()
        tolerance = flexq.plugin.manager.registry.encode(
            name, path, weights(), {NORM: norm_tensor()}
        )
        assert isinstance(tolerance, float)
        yield name, path
    finally:
        if name == "int8row":
            flexq.unregister_format(name)


@pytest.fixture
def int8row_ckpt(tmp_path: Path, int8row: str) -> Path:
    """A sharded int8row checkpoint of the tiny model plus a BF16 norm (passthrough)."""
    tensors = int8row_tensors(weights())
    tensors[NORM] = norm_tensor()
    return flexq.save_checkpoint(
        tmp_path / "int8row", tensors, config={"model_type": "llama"}, max_shard_bytes=20_000
    )


def dequantized_copy(src: Path, dst: Path, formats: list[str] | None = None) -> Path:
    """The same checkpoint with every logical tensor dequantized to float32 (plain safetensors)."""
    ct = flexq.compose(src, formats)
    tensors: dict[str, Any] = {}
    for key, entry in ct.entries.items():
        dtype = "float32" if entry.dtype in ("bfloat16", "float16", "float32") else entry.dtype
        tensors[key] = flexq.RawTensor.of(ct.load(key, dtype))
    return flexq.save_checkpoint(dst, tensors)


@pytest.fixture
def checkpoint_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys of every tensor read through :meth:`flexq.io.checkpoint.Checkpoint.read`
    while the test runs, in order (to prove a refusal came before any read)."""
    from flexq.io.checkpoint import Checkpoint

    reads: list[str] = []
    real = Checkpoint.read

    def counted(self: Checkpoint, key: str, *args: Any, **kwargs: Any) -> np.ndarray:
        reads.append(key)
        return real(self, key, *args, **kwargs)

    monkeypatch.setattr(Checkpoint, "read", counted)
    return reads
