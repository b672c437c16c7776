"""Fixtures for the gptq tests: an independent numpy oracle and tiny checkpoint builders.

The oracle decodes GPTQ tensors code by code from the layout facts in
``notes/formats.md`` section 5 and the producers' packers (a little-endian bit
stream along the packed axis; v1 zeros stored by subtracting one per field from
the whole word, or field by field for 3 bits), with Python integers, sharing no
code with the package.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from flexq import RawTensor, save_checkpoint
from flexq.testing import helpers, round_to, same_bits

SCALE_NUMPY = {"F16": np.float16, "BF16": ml_dtypes.bfloat16, "F32": np.float32}


def stream_code(words: list[int], bits: int, k: int) -> int:
    """Code ``k`` of a little-endian bit stream over 32-bit ``words``."""
    stream = sum((w & 0xFFFFFFFF) << (32 * n) for n, w in enumerate(words))
    return (stream >> (bits * k)) & ((1 << bits) - 1)


def unpack_stream(column: np.ndarray, bits: int) -> np.ndarray:
    """Every code of one packed column (1-D int32 words)."""
    words = [int(w) for w in column]
    count = len(words) * 32 // bits
    return np.array([stream_code(words, bits, k) for k in range(count)], np.int64)


def v1_word(word: int, bits: int) -> int:
    """A v1 zero word with its per-field ones added back (2/4/8 bits), modulo 2**32."""
    ones = sum(1 << (bits * j) for j in range(32 // bits))
    return ((word & 0xFFFFFFFF) + ones) & 0xFFFFFFFF


def reference_zeros(qzeros: np.ndarray, bits: int, v1: bool) -> np.ndarray:
    """z [n_groups, out] from qzeros [n_groups, out*bits/32]."""
    rows = []
    for row in qzeros:
        words = [int(w) for w in row]
        if v1 and bits != 3:
            words = [v1_word(w, bits) for w in words]
        codes = unpack_stream(np.array(words, np.int64), bits)
        rows.append((codes + 1) % 8 if v1 and bits == 3 else codes)
    return np.array(rows, np.int64).reshape(qzeros.shape[0], -1)


def reference_decode(
    qweight: np.ndarray,
    qzeros: np.ndarray,
    scales: np.ndarray,
    g_idx: np.ndarray | None,
    bits: int,
    group_size: int,
    v1: bool,
) -> np.ndarray:
    """The float32 logical weight [out, in]: s[g, o] * (q[i, o] - z[g, o]), g = g_idx[i]."""
    out_f = qweight.shape[1]
    q = np.stack([unpack_stream(qweight[:, o], bits) for o in range(out_f)], axis=1)
    in_f = q.shape[0]
    z = reference_zeros(qzeros, bits, v1)
    g = in_f if group_size == -1 else group_size
    groups = np.arange(in_f) // g if g_idx is None else g_idx.astype(np.int64)
    s = np.asarray(scales).astype(np.float32)
    w = np.empty((out_f, in_f), np.float32)
    for i in range(in_f):
        w[:, i] = (q[i] - z[groups[i]]).astype(np.float32) * s[groups[i]]
    return w


def unit_codes(bits: int) -> int:
    """Codes per smallest whole run of words: 32 for 3 bits, else 32 / bits."""
    return 32 if bits == 3 else 32 // bits


@dataclass
class GptqTensors:
    """Raw GPTQ tensors of one linear, as written to a test checkpoint."""

    bits: int
    group_size: int
    v1: bool
    qweight: np.ndarray
    qzeros: np.ndarray
    scales: np.ndarray
    scale_dtype: str = "F16"
    g_idx: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return self.qweight.shape[1], self.qweight.shape[0] * 32 // self.bits

    def raw(self, prefix: str) -> dict[str, RawTensor]:
        if self.scale_dtype == "BF16":
            scales = RawTensor("BF16", np.asarray(self.scales).view(np.uint16))
        else:
            scales = RawTensor.of(np.asarray(self.scales))
        out = {
            f"{prefix}.qweight": RawTensor.of(self.qweight),
            f"{prefix}.qzeros": RawTensor.of(self.qzeros),
            f"{prefix}.scales": scales,
        }
        if self.g_idx is not None:
            out[f"{prefix}.g_idx"] = RawTensor.of(self.g_idx.astype(np.int32))
        return out

    def reference(self) -> np.ndarray:
        return reference_decode(
            self.qweight, self.qzeros, self.scales, self.g_idx, self.bits, self.group_size, self.v1
        )


def random_gptq(
    rng: np.random.Generator,
    bits: int,
    out_f: int,
    in_f: int,
    group_size: int,
    *,
    v1: bool = True,
    g_idx: str = "trivial",
    scale_dtype: str = "F16",
) -> GptqTensors:
    """Random words (every bit pattern), random scales and a g_idx of the given kind:
    ``none``, ``trivial`` (i // g), ``permuted`` (act-order) or ``random`` (any map)."""
    g = in_f if group_size == -1 else group_size
    n_groups = -(-in_f // g)
    words = rng.integers(-(2**31), 2**31, size=(in_f * bits // 32, out_f), dtype=np.int64)
    zwords = rng.integers(-(2**31), 2**31, size=(n_groups, out_f * bits // 32), dtype=np.int64)
    scales = (rng.standard_normal((n_groups, out_f)) * 0.01).astype(SCALE_NUMPY[scale_dtype])
    index: np.ndarray | None
    if g_idx == "none":
        index = None
    elif g_idx == "trivial":
        index = np.arange(in_f) // g
    elif g_idx == "permuted":
        index = np.empty(in_f, np.int64)
        index[rng.permutation(in_f)] = np.arange(in_f) // g
    else:
        index = rng.integers(0, n_groups, size=in_f)
    return GptqTensors(
        bits,
        group_size,
        v1,
        words.astype(np.int32),
        zwords.astype(np.int32),
        scales,
        scale_dtype,
        None if index is None else index.astype(np.int32),
    )


def gptq_config(
    bits: int, group_size: int, *, v1: bool = True, sym: bool = False, **extra: Any
) -> dict[str, Any]:
    """A config.json with an AutoGPTQ (v1) or GPTQModel (v2) quantization_config."""
    qc = {
        "quant_method": "gptq",
        "bits": bits,
        "group_size": group_size,
        "sym": sym,
        "desc_act": extra.pop("desc_act", False),
        "checkpoint_format": "gptq" if v1 else "gptq_v2",
        **extra,
    }
    return {"quantization_config": qc}


@dataclass
class Written:
    """A checkpoint written for one test, and what went into it."""

    path: Path
    linears: dict[str, GptqTensors] = field(default_factory=dict)


@contextmanager
def written(
    linears: dict[str, GptqTensors],
    config: dict[str, Any],
    extra: dict[str, RawTensor] | None = None,
) -> Iterator[Written]:
    """Write ``linears`` (prefix -> tensors) with ``config`` into a fresh directory."""
    with tempfile.TemporaryDirectory() as tmp:
        tensors: dict[str, RawTensor] = dict(extra or {})
        for prefix, lin in linears.items():
            tensors.update(lin.raw(prefix))
        path = save_checkpoint(Path(tmp) / "ckpt", tensors, config=config)
        yield Written(path, linears)


@pytest.fixture(scope="session")
def oracle() -> SimpleNamespace:
    """The test helpers, handed to test modules as one fixture (they cannot import conftest)."""
    return helpers(
        GptqTensors,
        random_gptq,
        reference_decode,
        reference_zeros,
        unpack_stream,
        round_to,
        same_bits,
        gptq_config,
        written,
        unit_codes,
    )
