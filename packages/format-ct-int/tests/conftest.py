"""Fixtures for the ct-int tests: an independent numpy oracle and random checkpoint builders.

The oracle shares no code with the package. It packs and unpacks codes as a
bit stream (element ``j`` of a row at bit ``j*bits``, words little-endian),
the definition in compressed-tensors' ``pack_to_int32`` docstring (0.18 on), or
for odd widths as 0.17 did (``32 // bits`` codes per word, the rest unused), and
dequantizes act-order weights the way compressed-tensors 0.12 did: permute the
columns by ``argsort(g_idx)``, dequantize contiguous groups, permute back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from flexq import RawTensor, save_checkpoint
from flexq.testing import helpers, round_to

SCALE_NUMPY = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}


def bit_positions(count: int, bits: int, dense: bool) -> np.ndarray:
    """Bit position of element j of a row: j*bits (dense), or slot j % k of word j // k."""
    j = np.arange(count)
    if dense:
        return j * bits
    k = 32 // bits
    return (j // k) * 32 + (j % k) * bits


def bitpack(codes: np.ndarray, bits: int, dense: bool = True) -> np.ndarray:
    """Unsigned codes [R, C] -> int32 words [R, W] (W = ceil(C*bits/32) dense,
    ceil(C / (32 // bits)) per word)."""
    rows, cols = codes.shape
    width = -(-cols * bits // 32) if dense else -(-cols // (32 // bits))
    # Python integers per row: a code may straddle two words.
    out = np.zeros((rows, width), dtype=np.uint32)
    pos = bit_positions(cols, bits, dense)
    for r in range(rows):
        stream = 0
        for j in range(cols):
            stream |= int(codes[r, j]) << int(pos[j])
        for w in range(width):
            out[r, w] = (stream >> (32 * w)) & 0xFFFFFFFF
    return out.view(np.int32)


def bitunpack(words: np.ndarray, bits: int, count: int, dense: bool = True) -> np.ndarray:
    """int32 words [R, W] -> the first ``count`` unsigned codes of each row (int64)."""
    u = words.view(np.uint32).astype(np.int64)
    out = np.zeros((u.shape[0], count), dtype=np.int64)
    pos = bit_positions(count, bits, dense)
    for r in range(u.shape[0]):
        stream = sum(int(v) << (32 * w) for w, v in enumerate(u[r]))
        for j in range(count):
            out[r, j] = (stream >> int(pos[j])) & ((1 << bits) - 1)
    return out


@dataclass
class Case:
    """One random linear: its checkpoint tensors, config and oracle result."""

    fmt: str
    bits: int
    strategy: str
    shape: tuple[int, int]
    block: tuple[int, int]
    symmetric: bool
    scale_dtype: str
    g_idx: np.ndarray | None
    tensors: dict[str, RawTensor] = field(default_factory=dict)
    expected: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dense: bool = True

    def config(self, prefix: str = "fc") -> dict[str, Any]:
        weights = {
            "num_bits": self.bits,
            "type": "int",
            "symmetric": self.symmetric,
            "strategy": self.strategy,
            "group_size": self.block[1] if self.strategy == "group" else None,
            "block_structure": list(self.block) if self.strategy == "block" else None,
            "actorder": "group" if self.g_idx is not None else None,
        }
        group = {"format": self.fmt, "targets": ["Linear"], "weights": weights}
        return {
            "torch_dtype": "bfloat16",
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "format": self.fmt,
                "config_groups": {"group_0": group},
                "ignore": ["lm_head"],
                "version": "0.19.0" if self.dense else "0.17.1",
            },
        }

    def save(self, path: Path, prefix: str = "fc") -> Path:
        tensors = {f"{prefix}.{k}": v for k, v in self.tensors.items()}
        return save_checkpoint(path, tensors, config=self.config(prefix))


def stored_scale(values: np.ndarray, dtype: str) -> RawTensor:
    arr = values.astype(SCALE_NUMPY[dtype])
    if dtype == "BF16":
        return RawTensor("BF16", arr.view(np.uint16))
    return RawTensor.of(arr)


def random_case(
    rng: np.random.Generator,
    *,
    fmt: str,
    bits: int,
    strategy: str,
    shape: tuple[int, int],
    group: int = 0,
    block: tuple[int, int] = (1, 1),
    symmetric: bool = True,
    act_order: bool = False,
    scale_dtype: str = "BF16",
    dense: bool = True,
) -> Case:
    out_f, in_f = shape
    b0, b1 = {
        "tensor": (out_f, in_f),
        "channel": (1, in_f),
        "group": (1, group),
        "block": block,
    }[strategy]
    grid = (-(-out_f // b0), -(-in_f // b1))
    offset = 1 << (bits - 1)
    # Scales of both signs over a wide range, exactly representable in their dtype.
    mag = rng.uniform(0.5, 2.0, grid) * np.exp2(rng.integers(-12, 3, grid))
    scale = (mag * rng.choice([-1.0, 1.0], grid)).astype(SCALE_NUMPY[scale_dtype])
    g_idx = None
    if act_order:
        order = rng.permutation(in_f)
        g_idx = np.empty(in_f, np.int32)
        g_idx[order] = np.arange(in_f) // b1
    tensors: dict[str, RawTensor] = {}
    if fmt == "pack-quantized":
        codes = rng.integers(0, 1 << bits, shape)
        tensors["weight_packed"] = RawTensor("I32", bitpack(codes, bits, dense))
        tensors["weight_shape"] = RawTensor("I64", np.array(shape, np.int64))
        q = codes - offset
    else:
        q = rng.integers(-128, 128, shape)
        tensors["weight"] = RawTensor("I8", q.astype(np.int8))
    s_stored = scale.reshape(1) if strategy == "tensor" else scale
    tensors["weight_scale"] = stored_scale(s_stored, scale_dtype)
    z = np.zeros(grid, np.int64)
    if not symmetric:
        lo, hi = (-offset, offset - 1) if fmt == "pack-quantized" else (-128, 127)
        z = rng.integers(lo, hi + 1, grid)
        if fmt == "pack-quantized" and strategy in ("group", "channel"):
            packed = bitpack((z + offset).T, bits, dense).T.copy()
            tensors["weight_zero_point"] = RawTensor("I32", packed)
        else:
            zs = z.reshape(1) if strategy == "tensor" else z
            tensors["weight_zero_point"] = RawTensor("I8", zs.astype(np.int8))
    if g_idx is not None:
        tensors["weight_g_idx"] = RawTensor("I32", g_idx)
    case = Case(fmt, bits, strategy, shape, (b0, b1), symmetric, scale_dtype, g_idx, tensors)
    case.dense = dense
    case.expected = reference_decode(case)
    return case


def reference_decode(case: Case) -> np.ndarray:
    """The float32 logical weight from the case's stored tensors alone."""
    t = {k: v.data for k, v in case.tensors.items()}
    out_f, in_f = case.shape
    bits, (b0, b1) = case.bits, case.block
    offset = 1 << (bits - 1)
    if case.fmt == "pack-quantized":
        q = bitunpack(t["weight_packed"], bits, in_f, case.dense) - offset
    else:
        q = t["weight"].astype(np.int64)
    raw_scale = case.tensors["weight_scale"]
    if raw_scale.dtype == "BF16":
        s = raw_scale.data.view(ml_dtypes.bfloat16).astype(np.float64)
    else:
        s = raw_scale.data.astype(np.float64)
    grid = (-(-out_f // b0), -(-in_f // b1))
    s = s.reshape(grid)
    z = np.zeros(grid, np.int64)
    if "weight_zero_point" in t:
        zt = t["weight_zero_point"]
        if zt.dtype == np.int32:
            z = bitunpack(zt.T.copy(), bits, out_f, case.dense).T - offset
        else:
            z = zt.astype(np.int64).reshape(grid)
    if case.g_idx is not None:
        perm = np.argsort(case.g_idx, kind="stable")
        qp = q[:, perm]
        cols = np.arange(in_f) // b1
        wp = (qp - z[:, cols]) * s[:, cols]
        w = np.empty_like(wp)
        w[:, perm] = wp
        return np.asarray(w, dtype=np.float32)
    rows = np.arange(out_f) // b0
    cols = np.arange(in_f) // b1
    return np.asarray((q - z[rows][:, cols]) * s[rows][:, cols], dtype=np.float32)


@pytest.fixture(scope="session")
def oracle() -> SimpleNamespace:
    """The oracle's functions, for tests (conftest is not importable as a module)."""
    return helpers(Case, bitpack, bitunpack, random_case, reference_decode, round_to, stored_scale)
