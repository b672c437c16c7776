"""Fixtures for the quark tests: tiny synthetic Quark exports and an independent numpy oracle.

The oracle decodes element by element from the layout facts of amd-quark 0.13
(``Pack_4_bits`` slot order and sign extension, ``Pack_fp4`` nibble order, E8M0
scales) with ml_dtypes' own FP8/FP4 element tables, sharing no code with the package.
Random codes stand in for the encoder: every code is a valid Quark value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from flexq import RawTensor, save_checkpoint

#: Quark's unpack ORDER under pack_method "reorder": logical j of eight is in slot ORDER[j].
ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def spec(dtype: str, qscheme: str, **kw: Any) -> dict[str, Any]:
    """One Quark weight spec as ``QTensorConfig.to_dict`` writes it."""
    return {
        "dtype": dtype,
        "is_dynamic": False,
        "qscheme": qscheme,
        "ch_axis": kw.pop("ch_axis", 0 if qscheme == "per_channel" else 1),
        "group_size": kw.pop("group_size", None),
        "symmetric": kw.pop("symmetric", True),
        "round_method": "half_even",
        "scale_type": "float",
        "scale_format": kw.pop("scale_format", None),
        **kw,
    }


SPECS = {
    "fp8-tensor": spec("fp8_e4m3", "per_tensor"),
    "fp8-channel": spec("fp8_e4m3", "per_channel"),
    "int4-group": spec("int4", "per_group", group_size=16),
    "uint4-group": spec("uint4", "per_group", group_size=16, symmetric=False),
    "mxfp4": spec("fp4", "per_group", group_size=32, scale_format="e8m0"),
}


def quark_config(weight: Any, *, pack_method: str = "reorder", **extra: Any) -> dict[str, Any]:
    """A config.json with a Quark ``quantization_config`` over one global weight spec."""
    qc = {
        "quant_method": "quark",
        "global_quant_config": {"weight": weight, "input_tensors": None, "bias": None},
        "layer_quant_config": {},
        "layer_type_quant_config": {},
        "exclude": ["lm_head"],
        "export": {"pack_method": pack_method, "weight_format": "real_quantized"},
        **extra,
    }
    return {"torch_dtype": "bfloat16", "quantization_config": qc}


def bf16(x: np.ndarray) -> RawTensor:
    return RawTensor("BF16", np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16))


def pack4(codes: np.ndarray, order: list[int]) -> np.ndarray:
    """[rows, cols] 4-bit codes (signed or unsigned) -> int32 [rows, cols/8], slot order[j] = col j."""
    u = (codes.astype(np.int64) & 0xF).reshape(codes.shape[0], -1, 8)
    words = np.zeros(u.shape[:2], np.int64)
    for j in range(8):
        words |= u[:, :, j] << (4 * order[j])
    return words.astype(np.uint32).view(np.int32)


def _e4m3(codes: np.ndarray) -> np.ndarray:
    return np.asarray(codes.view(ml_dtypes.float8_e4m3fn), dtype=np.float32)


class Linear:
    """Random tensors of one Quark linear ``fc`` [out, in] of a scheme, and their reference."""

    def __init__(
        self, rng: np.random.Generator, kind: str, out_f: int, in_f: int, order: list[int] = ORDER
    ) -> None:
        self.kind, self.out_f, self.in_f, self.order = kind, out_f, in_f, order
        g = SPECS[kind]["group_size"] or in_f
        self.group = g
        if kind.startswith("fp8"):
            codes = rng.integers(0, 256, (out_f, in_f), dtype=np.uint8)
            codes[(codes & 0x7F) == 0x7F] = 0x38  # no NaN codes
            self.codes = codes
            n = () if kind == "fp8-tensor" else (out_f,)
            self.scale = (rng.random(n) * 0.1 + 1e-3).astype(ml_dtypes.bfloat16).astype(np.float32)
        elif kind == "mxfp4":
            self.codes = rng.integers(0, 16, (out_f, in_f), dtype=np.uint8)
            self.exps = rng.integers(110, 140, (out_f, in_f // 32), dtype=np.uint8)
        else:
            lo, hi = (-8, 8) if kind == "int4-group" else (0, 16)
            self.codes = rng.integers(lo, hi, (out_f, in_f)).astype(np.int8)
            self.zeros = (
                np.zeros((out_f, in_f // g), np.int8)
                if kind == "int4-group"
                else rng.integers(0, 16, (out_f, in_f // g)).astype(np.int8)
            )
            self.scale = (
                (rng.random((out_f, in_f // g)) * 0.1 + 1e-3)
                .astype(ml_dtypes.bfloat16)
                .astype(np.float32)
            )

    def raw(self, prefix: str = "fc") -> dict[str, RawTensor]:
        """The tensors Quark's exporter writes for this linear."""
        if self.kind.startswith("fp8"):
            return {
                f"{prefix}.weight": RawTensor("F8_E4M3", self.codes),
                f"{prefix}.weight_scale": bf16(self.scale),
            }
        if self.kind == "mxfp4":
            pairs = self.codes.reshape(self.out_f, -1, 2)
            packed = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).astype(np.uint8)
            return {
                f"{prefix}.weight": RawTensor("U8", packed),
                f"{prefix}.weight_scale": RawTensor("U8", self.exps),
            }
        return {
            f"{prefix}.weight": RawTensor("I32", pack4(self.codes.T, self.order)),
            f"{prefix}.weight_zero_point": RawTensor("I32", pack4(self.zeros.T, self.order)),
            f"{prefix}.weight_scale": bf16(self.scale.T),
        }

    def reference(self) -> np.ndarray:
        """Quark's dequantization, element by element, in float32."""
        if self.kind == "fp8-tensor":
            return _e4m3(self.codes) * np.float32(self.scale)
        if self.kind == "fp8-channel":
            return _e4m3(self.codes) * self.scale[:, None]
        if self.kind == "mxfp4":
            values = np.asarray(self.codes.view(ml_dtypes.float4_e2m1fn), dtype=np.float32)
            s = np.ldexp(np.float32(1), self.exps.astype(np.int32) - 127).astype(np.float32)
            return np.asarray(values * np.repeat(s, 32, axis=1), dtype=np.float32)
        w = np.empty((self.out_f, self.in_f), np.float32)
        for i in range(self.in_f):
            grp = i // self.group
            q = self.codes[:, i].astype(np.float32)
            z = self.zeros[:, grp].astype(np.float32)
            w[:, i] = (q - z) * self.scale[:, grp]
        return w


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """The oracle's one rounding, in the core's result convention (bfloat16 as uint16 bits)."""
    if dtype == "bfloat16":
        return x.astype(ml_dtypes.bfloat16).view(np.uint16)
    return x.astype(dtype)


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    """Assert identical shape, dtype and bits."""
    assert a.shape == b.shape
    assert a.dtype == b.dtype
    width = {2: np.uint16, 4: np.uint32}[a.dtype.itemsize]
    np.testing.assert_array_equal(np.ascontiguousarray(a).view(width), b.view(width))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(25)


WriteCheckpoint = Callable[..., Path]


@pytest.fixture
def write_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> WriteCheckpoint:
    """Write tensors + config.json into a fresh directory; returns the path."""

    def write(
        tensors: Mapping[str, RawTensor],
        config: Mapping[str, Any],
        shard_of: Mapping[str, int] | None = None,
    ) -> Path:
        path = tmp_path_factory.mktemp("quark")
        save_checkpoint(path, tensors, config=config, shard_of=shard_of)
        return path

    return write


@pytest.fixture
def oracle() -> Any:
    """This module: the tests reach the builders and the oracle through it (conftest
    modules are not importable under ``--import-mode=importlib``)."""
    import sys

    return sys.modules[__name__]
