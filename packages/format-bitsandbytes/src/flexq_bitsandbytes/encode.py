"""The bitsandbytes encoder: float arrays -> what bnb + transformers' ``save_pretrained`` write.

For round trips, tests and ``flexq demo``; the real producer is the oracle for
the decoder. The names, dtypes, shapes, blob and config are bitsandbytes
0.50.2's; the quantization rule is the same (per flat block
``absmax = max|x|``, nearest code of ``x / absmax``; double quantization codes
``absmax - mean(absmax)`` with the dynamic map in groups of 256), though
rounding ties and the float32 mean may differ from bnb's kernels in the last bit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from flexq import RawTensor
from flexq_bitsandbytes.codebook import CODE_BOOKS, dynamic_map
from flexq_bitsandbytes.layout import (
    ABSMAX,
    NESTED_ABSMAX,
    NESTED_QUANT_MAP,
    QUANT_MAP,
    QUANT_STATE,
    ROW_FORMAT,
    SCB,
    WEIGHT_FORMAT,
)

Mode = Literal["nf4", "fp4", "int8"]
#: Absmax values per nested block (bnb's ``quantize_blockwise(..., blocksize=256)``).
NESTED_BLOCKSIZE = 256


def quantize(
    tensors: Mapping[str, npt.ArrayLike],
    *,
    mode: Mode = "nf4",
    double_quant: bool = True,
    blocksize: int = 64,
    dtype: str = "bfloat16",
) -> dict[str, RawTensor]:
    """Quantize float tensors (keys ``X.weight``) to bitsandbytes checkpoint tensors.

    :param mode: ``"nf4"`` / ``"fp4"`` (4-bit, any shape, flattened) or ``"int8"``
        (LLM.int8, ``[out, in]`` only).
    :param double_quant: 4-bit only: code the absmax values too
        (``bnb_4bit_use_double_quant``).
    :param blocksize: 4-bit elements per absmax (bnb allows 32..4096 powers of two;
        any positive size works here).
    :param dtype: the natural dtype recorded in the quant state.
    :raises ValueError: on an unknown mode, a bad blocksize or an int8 tensor that is not 2-D.
    """
    out: dict[str, RawTensor] = {}
    for key, value in tensors.items():
        x = np.asarray(value, dtype=np.float32)
        if mode == "int8":
            out.update(quantize_int8(key, x))
        elif mode in CODE_BOOKS:
            out.update(quantize_4bit(key, x, mode, blocksize, double_quant, dtype))
        else:
            raise ValueError(f"unknown bitsandbytes mode {mode!r}")
    return out


def quantize_4bit(
    key: str, x: np.ndarray, quant_type: str, blocksize: int, double_quant: bool, dtype: str
) -> dict[str, RawTensor]:
    """The six (double quantization) or four tensors bnb writes for parameter ``key``."""
    if blocksize < 1:
        raise ValueError(f"blocksize must be positive, got {blocksize}")
    book = CODE_BOOKS[quant_type]
    flat = x.reshape(-1)
    n = flat.size
    blocks = -(-n // blocksize)
    padded = np.zeros(blocks * blocksize, np.float32)
    padded[:n] = flat
    grid = padded.reshape(blocks, blocksize)
    absmax = np.abs(grid).max(axis=1) if n else np.zeros(0, np.float32)
    safe = np.maximum(absmax, np.float32(1e-38))
    scaled = np.clip(grid * (np.float32(1.0) / safe)[:, None], -1.0, 1.0).reshape(-1)[:n]
    codes = nearest_codes(book, np.concatenate([scaled, np.zeros(n % 2, np.float32)]))
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8).reshape(-1, 1)
    state: dict[str, Any] = {
        "quant_type": quant_type,
        "blocksize": blocksize,
        "dtype": dtype,
        "shape": list(x.shape),
    }
    tensors = {key: RawTensor("U8", packed), key + QUANT_MAP: RawTensor("F32", book.copy())}
    if double_quant:
        offset = np.float32(absmax.mean(dtype=np.float32)) if n else np.float32(0.0)
        qabsmax, nested_absmax = quantize_blockwise(absmax - offset, NESTED_BLOCKSIZE)
        tensors[key + ABSMAX] = RawTensor("U8", qabsmax)
        tensors[key + NESTED_ABSMAX] = RawTensor("F32", nested_absmax)
        tensors[key + NESTED_QUANT_MAP] = RawTensor("F32", dynamic_map())
        state.update(
            nested_blocksize=NESTED_BLOCKSIZE, nested_dtype="float32", nested_offset=float(offset)
        )
    else:
        tensors[key + ABSMAX] = RawTensor("F32", absmax.astype(np.float32))
    blob = np.frombuffer(json.dumps(state).encode("utf-8"), dtype=np.uint8).copy()
    tensors[key + QUANT_STATE + quant_type] = RawTensor("U8", blob)
    return tensors


def quantize_blockwise(values: np.ndarray, blocksize: int) -> tuple[np.ndarray, np.ndarray]:
    """bnb's 8-bit blockwise quantization with the dynamic map: (U8 codes, F32 absmax per block)."""
    code = dynamic_map()
    n = values.size
    blocks = -(-n // blocksize)
    padded = np.zeros(blocks * blocksize, np.float32)
    padded[:n] = values
    grid = padded.reshape(blocks, blocksize)
    absmax = np.abs(grid).max(axis=1).astype(np.float32) if n else np.zeros(0, np.float32)
    safe = np.maximum(absmax, np.float32(1e-38))
    scaled = np.clip(grid * (np.float32(1.0) / safe)[:, None], -1.0, 1.0).reshape(-1)[:n]
    return nearest_codes(code, scaled), absmax


def nearest_codes(book: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Index into ``book`` of the value nearest each of ``values`` (ties go to the lower one)."""
    order = np.argsort(book, kind="stable")
    ordered = book[order].astype(np.float64)
    bounds = (ordered[:-1] + ordered[1:]) / 2
    at = np.searchsorted(bounds, values.astype(np.float64), side="left")
    codes: np.ndarray = order[at].astype(np.uint8)
    return codes


def quantize_int8(key: str, x: np.ndarray) -> dict[str, RawTensor]:
    """LLM.int8 as bnb's ``int8_vectorwise_quant``: SCB = row absmax, CB = rint(x * (127/SCB))."""
    if x.ndim != 2:
        raise ValueError(f"{key!r}: LLM.int8 weights are [out, in], got shape {x.shape}")
    stats = np.abs(x).max(axis=1).astype(np.float32) if x.size else np.zeros(len(x), np.float32)
    with np.errstate(divide="ignore"):
        factor = np.where(stats > 0, np.float32(127.0) / stats, np.float32(0.0))
    codes = np.clip(np.rint(x * factor[:, None].astype(np.float32)), -127, 127).astype(np.int8)
    module = key.removesuffix(".weight")
    return {
        key: RawTensor("I8", codes),
        module + SCB: RawTensor("F32", stats),
        module + WEIGHT_FORMAT: RawTensor("U8", np.array(ROW_FORMAT, dtype=np.uint8)),
    }


def quantization_config(
    mode: Mode = "nf4", *, double_quant: bool = True, skip: list[str] | None = None
) -> dict[str, Any]:
    """The ``quantization_config`` transformers 5.17 writes for a ``BitsAndBytesConfig``."""
    four = mode != "int8"
    return {
        "_load_in_4bit": four,
        "_load_in_8bit": not four,
        "bnb_4bit_compute_dtype": "float32",
        "bnb_4bit_quant_storage": "uint8",
        "bnb_4bit_quant_type": mode if four else "fp4",
        "bnb_4bit_use_double_quant": four and double_quant,
        "llm_int8_enable_fp32_cpu_offload": False,
        "llm_int8_has_fp16_weight": False,
        "llm_int8_skip_modules": skip,
        "llm_int8_threshold": 6.0,
        "load_in_4bit": four,
        "load_in_8bit": not four,
        "quant_method": "bitsandbytes",
    }
