"""Fixtures for the bitsandbytes tests: an independent numpy oracle and tiny checkpoint builders.

The oracle decodes element by element from the layout facts (bitsandbytes
0.50.2: flat blocks, element 2k in the high nibble, nested absmax through the
dynamic map plus the offset, ``(CB * SCB) * float32(1/127)``), sharing no code
with the package. The builders write random codes and scales with their own
JSON blob, so the decoder is tested on bytes the package's encoder never made.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from flexq import RawTensor, save_checkpoint

NF4 = np.array(
    [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
     -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
     0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
     0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0],
    dtype=np.float32,
)  # fmt: skip
#: bnb's get_4bit_type("fp4"): [0, 1/16, 8, 12, 4, 6, 2, 3] and negatives, over 12 (code 8 is +0).
FP4 = np.array(
    [0.0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, 0.0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0],
    dtype=np.float32,
) / np.float32(12.0)
BOOKS = {"nf4": NF4, "fp4": FP4}
INV_127 = np.float32(7.874015718698502e-3)


def reference_4bit(case: dict[str, Any]) -> np.ndarray:
    """The float32 logical tensor of a 4-bit ``case`` (see :func:`random_4bit`), one element at a time."""
    shape, bs = case["shape"], case["blocksize"]
    n = int(np.prod(shape))
    packed = case["packed"].reshape(-1)
    book = BOOKS[case["quant_type"]]
    if case["nested"]:
        codes, nmap, nabs = case["absmax"], case["nested_map"], case["nested_absmax"]
        nbs, offset = case["nested_blocksize"], np.float32(case["nested_offset"])
        absmax = np.array(
            [np.float32(nmap[codes[j]] * nabs[j // nbs]) + offset for j in range(codes.size)],
            dtype=np.float32,
        )
    else:
        absmax = case["absmax"]
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        byte = int(packed[i // 2])
        code = byte >> 4 if i % 2 == 0 else byte & 0x0F
        out[i] = book[code] * absmax[i // bs]
    return out.reshape(shape)


def reference_int8(cb: np.ndarray, scb: np.ndarray) -> np.ndarray:
    out = np.empty(cb.shape, dtype=np.float32)
    for r in range(cb.shape[0]):
        for c in range(cb.shape[1]):
            out[r, c] = np.float32(np.float32(cb[r, c]) * scb[r]) * INV_127
    return out


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (ml_dtypes)."""
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def bits(x: Any) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def random_4bit(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    quant_type: str = "nf4",
    blocksize: int = 64,
    nested: bool = True,
    nested_blocksize: int = 256,
    dtype: str = "bfloat16",
) -> dict[str, Any]:
    """Random codes, absmax (or nested codes, nested absmax, map, offset) for one tensor."""
    n = int(np.prod(shape))
    blocks = -(-n // blocksize)
    case: dict[str, Any] = {
        "shape": shape,
        "quant_type": quant_type,
        "blocksize": blocksize,
        "nested": nested,
        "dtype": dtype,
        "packed": rng.integers(0, 256, ((n + 1) // 2, 1), dtype=np.uint8),
    }
    if nested:
        groups = -(-blocks // nested_blocksize)
        case.update(
            absmax=rng.integers(0, 256, blocks, dtype=np.uint8),
            nested_map=np.sort(rng.uniform(-1, 1, 256)).astype(np.float32),
            nested_absmax=rng.uniform(0.001, 0.2, groups).astype(np.float32),
            nested_blocksize=nested_blocksize,
            nested_offset=float(np.float32(rng.uniform(0.01, 0.1))),
        )
    else:
        case["absmax"] = rng.uniform(0.001, 2.0, blocks).astype(np.float32)
    return case


def drawn_4bit(params: dict[str, Any]) -> dict[str, Any]:
    """:func:`random_4bit` of a hypothesis-drawn ``params`` (its ``seed``, ``shape``,
    ``quant_type``, ``blocksize``, ``nested`` and, if drawn, ``nested_blocksize`` and
    ``dtype``)."""
    names = ("quant_type", "blocksize", "nested", "nested_blocksize", "dtype")
    chosen = {k: params[k] for k in names if k in params}
    return random_4bit(np.random.default_rng(params["seed"]), params["shape"], **chosen)


def tensors_4bit(key: str, case: dict[str, Any]) -> dict[str, RawTensor]:
    """The checkpoint tensors of ``case`` under parameter name ``key`` (bnb's names)."""
    state: dict[str, Any] = {
        "quant_type": case["quant_type"],
        "blocksize": case["blocksize"],
        "dtype": case["dtype"],
        "shape": list(case["shape"]),
    }
    out = {
        key: RawTensor("U8", case["packed"]),
        key + ".quant_map": RawTensor("F32", BOOKS[case["quant_type"]].copy()),
    }
    if case["nested"]:
        state.update(
            nested_blocksize=case["nested_blocksize"],
            nested_dtype="float32",
            nested_offset=case["nested_offset"],
        )
        out[key + ".absmax"] = RawTensor("U8", case["absmax"])
        out[key + ".nested_absmax"] = RawTensor("F32", case["nested_absmax"])
        out[key + ".nested_quant_map"] = RawTensor("F32", case["nested_map"])
    else:
        out[key + ".absmax"] = RawTensor("F32", case["absmax"])
    blob = np.frombuffer(json.dumps(state).encode(), dtype=np.uint8).copy()
    out[key + ".quant_state.bitsandbytes__" + case["quant_type"]] = RawTensor("U8", blob)
    return out


def random_int8(rng: np.random.Generator, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    cb = rng.integers(-127, 128, (rows, cols), dtype=np.int8)
    return cb, rng.uniform(0.001, 3.0, rows).astype(np.float32)


def tensors_int8(module: str, cb: np.ndarray, scb: np.ndarray) -> dict[str, RawTensor]:
    return {
        module + ".weight": RawTensor("I8", cb),
        module + ".SCB": RawTensor("F32", scb),
        module + ".weight_format": RawTensor("U8", np.array(0, dtype=np.uint8)),
    }


def config_4bit(**extra: Any) -> dict[str, Any]:
    qc = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False}
    return {"quantization_config": {**qc, **extra}}


def config_8bit(**extra: Any) -> dict[str, Any]:
    qc = {"quant_method": "bitsandbytes", "load_in_4bit": False, "load_in_8bit": True}
    return {"quantization_config": {**qc, **extra}}


Build = Callable[..., Path]


@pytest.fixture(scope="session")
def kit() -> ModuleType:
    """This module: the oracle, the random cases and the tensor builders above."""
    return sys.modules[__name__]


@pytest.fixture(scope="session")
def build() -> Build:
    """``build(directory, tensors, config)`` writes a checkpoint and returns its path."""

    def write(
        directory: Path, tensors: dict[str, RawTensor], config: dict[str, Any] | None = None
    ) -> Path:
        return save_checkpoint(directory, tensors, config=config or {})

    return write
