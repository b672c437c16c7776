"""Fixtures for the int4-awq tests: an independent numpy oracle and tiny checkpoint builders.

The oracle decodes AWQ tensors element by element from the layout facts in
``notes/formats.md`` (slot of logical column j, per-group zeros and scales),
sharing no code with the package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from flexq import RawTensor, save_checkpoint
from flexq.testing import helpers, round_to, same_bits

#: GEMM: logical column j of a group of eight sits in nibble slot ORDER.index(j).
ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def nibble(words: np.ndarray, slot: int) -> np.ndarray:
    """Nibble ``slot`` of int32 words, read unsigned (as int64)."""
    return ((words.astype(np.int64) & 0xFFFFFFFF) >> (4 * slot)) & 0xF


def reference_decode(
    version: str, qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, group_size: int
) -> np.ndarray:
    """The float32 logical weight [out, in], one logical column (GEMM) or row (GEMV) at a time."""
    if version == "gemm":
        in_f, out_f = qweight.shape[0], qweight.shape[1] * 8
        g = in_f if group_size == -1 else group_size
        wt = np.empty((in_f, out_f), dtype=np.float32)
        group_of_row = np.arange(in_f) // g
        for n in range(out_f):
            slot = ORDER.index(n % 8)
            q = nibble(qweight[:, n // 8], slot).astype(np.float32)
            z = nibble(qzeros[:, n // 8], slot).astype(np.float32)[group_of_row]
            s = scales[:, n].astype(np.float32)[group_of_row]
            wt[:, n] = (q - z) * s
        return wt.T.copy()
    out_f, in_f = qweight.shape[0], qweight.shape[1] * 8
    g = in_f if group_size == -1 else group_size
    w = np.empty((out_f, in_f), dtype=np.float32)
    for i in range(in_f):
        grp = i // g
        q = nibble(qweight[:, i // 8], i % 8).astype(np.float32)
        z = nibble(qzeros[:, grp // 8], grp % 8).astype(np.float32)
        w[:, i] = (q - z) * scales[:, grp].astype(np.float32)
    return w


@dataclass
class AwqTensors:
    """Raw AWQ tensors of one linear, as written to a test checkpoint."""

    version: str
    group_size: int
    qweight: np.ndarray
    qzeros: np.ndarray
    scales: np.ndarray

    def reference(self) -> np.ndarray:
        return reference_decode(
            self.version, self.qweight, self.qzeros, self.scales, self.group_size
        )

    def raw(self, prefix: str) -> dict[str, RawTensor]:
        return {
            f"{prefix}.qweight": RawTensor.of(self.qweight),
            f"{prefix}.qzeros": RawTensor.of(self.qzeros),
            f"{prefix}.scales": RawTensor.of(self.scales),
        }


def gemv_width(n_groups: int, g: int) -> int:
    """Padded qzeros columns of AutoAWQ's GEMV layout, from the notes' formula."""
    m = 1 if g >= 128 else {64: 2, 32: 4}[g]
    return int(np.ceil(np.ceil(n_groups / 8) / m) * m)


def random_awq(
    rng: np.random.Generator, version: str, out_f: int, in_f: int, group_size: int
) -> AwqTensors:
    """Random raw words (every bit pattern, negative int32 included) and F16 scales."""
    g = in_f if group_size == -1 else group_size
    ng = in_f // g

    def words(*shape: int) -> np.ndarray:
        return rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.int32)

    scale_vals = rng.standard_normal(size=(max(out_f, in_f), 8 * max(ng, 1) + 64)) * 0.01
    if version == "gemm":
        qweight = words(in_f, out_f // 8)
        qzeros = words(ng, out_f // 8)
        scales = scale_vals[:ng, :out_f].astype(np.float16)
    else:
        width = gemv_width(ng, g)
        qweight = words(out_f, in_f // 8)
        # Padding past the real groups stays zero, as AutoAWQ writes it.
        zero_codes = np.zeros((out_f, width * 8), dtype=np.uint32)
        zero_codes[:, :ng] = rng.integers(0, 16, size=(out_f, ng))
        packed = np.zeros((out_f, width), dtype=np.uint32)
        for j in range(8):
            packed |= zero_codes[:, j::8] << np.uint32(4 * j)
        qzeros = packed.view(np.int32)
        scales = np.zeros((out_f, width * 8), dtype=np.float16)
        scales[:, :ng] = scale_vals[:out_f, :ng]
    return AwqTensors(version, group_size, qweight, qzeros, scales)


def awq_config(version: str, group_size: int, **extra: Any) -> dict[str, Any]:
    """config.json with an AutoAWQ quantization_config."""
    qc = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": group_size,
        "zero_point": True,
        "version": version,
        **extra,
    }
    return {"architectures": ["TinyForCausalLM"], "quantization_config": qc}


Writer = Callable[..., Path]


@pytest.fixture
def write_checkpoint(tmp_path: Path) -> Writer:
    """Write tensors + config into a fresh directory under tmp_path; returns its path."""
    count = 0

    def write(
        tensors: dict[str, RawTensor],
        config: dict[str, Any] | None,
        shard_of: dict[str, int] | None = None,
    ) -> Path:
        nonlocal count
        count += 1
        return save_checkpoint(tmp_path / f"ckpt{count}", tensors, config=config, shard_of=shard_of)

    return write


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240605)


@pytest.fixture(scope="session")
def oracle() -> SimpleNamespace:
    """The test helpers, handed to test modules as one fixture (they cannot import conftest)."""
    return helpers(
        random_awq, reference_decode, round_to, same_bits, awq_config, gemv_width, nibble
    )
