"""Safetensors dtype strings and how flexq holds each one in memory.

Used by the header parser (to check byte lengths), the reader (to return
arrays) and the composer (to name the Paddle dtype of a passthrough tensor).
Element formats numpy and Paddle cannot hold (F8_*, F4, F6) are returned as
raw uint8 bytes; BF16 is returned as its raw uint16 bit pattern.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexq.threads import run_parts


@dataclass(frozen=True)
class StorageDtype:
    """How a safetensors dtype is laid out on disk and held by the reader.

    :ivar bits: bits per logical element on disk.
    :ivar numpy: numpy dtype of the array the reader returns.
    :ivar paddle: Paddle dtype name of the decoded values, or None when Paddle has
        no such dtype and a format plugin must decode the raw bytes.
    :ivar elems_per_item: logical elements per returned array item (2 for F4,
        whose header shape counts nibbles while the reader returns bytes).
    """

    bits: int
    numpy: np.dtype[np.generic]
    paddle: str | None
    elems_per_item: int = 1


def _d(bits: int, numpy: str, paddle: str | None, per_item: int = 1) -> StorageDtype:
    return StorageDtype(bits, np.dtype(numpy), paddle, per_item)


SAFETENSORS_DTYPES: dict[str, StorageDtype] = {
    "BOOL": _d(8, "bool", "bool"),
    "U8": _d(8, "uint8", "uint8"),
    "I8": _d(8, "int8", "int8"),
    "U16": _d(16, "uint16", None),
    "I16": _d(16, "int16", "int16"),
    "U32": _d(32, "uint32", None),
    "I32": _d(32, "int32", "int32"),
    "U64": _d(64, "uint64", None),
    "I64": _d(64, "int64", "int64"),
    "F16": _d(16, "float16", "float16"),
    "BF16": _d(16, "uint16", "bfloat16"),
    "F32": _d(32, "float32", "float32"),
    "F64": _d(64, "float64", "float64"),
    "C64": _d(64, "complex64", "complex64"),
    # One-byte and sub-byte element formats: raw bytes for a format plugin.
    "F8_E4M3": _d(8, "uint8", None),
    "F8_E5M2": _d(8, "uint8", None),
    "F8_E8M0": _d(8, "uint8", None),
    "F8_E4M3FNUZ": _d(8, "uint8", None),
    "F8_E5M2FNUZ": _d(8, "uint8", None),
    "F4": _d(4, "uint8", None, per_item=2),
    # F6 packs 4 elements in 3 bytes; readable whole only (see Checkpoint.read).
    "F6_E2M3": _d(6, "uint8", None),
    "F6_E3M2": _d(6, "uint8", None),
}


def storage_dtype(name: str) -> StorageDtype:
    """Return the layout of safetensors dtype ``name`` (KeyError when unknown)."""
    return SAFETENSORS_DTYPES[name]


def byte_length(dtype: str, shape: tuple[int, ...]) -> int | None:
    """Bytes a tensor of ``dtype`` and ``shape`` occupies, None if not whole bytes.

    Python integers: a hostile shape cannot overflow, and nothing is allocated.
    """
    count = 1
    for dim in shape:
        count *= dim
    bits = count * SAFETENSORS_DTYPES[dtype].bits
    return bits // 8 if bits % 8 == 0 else None


def bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen raw bfloat16 bit patterns (uint16) to float32 exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bfloat16_bits(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Round float32 to bfloat16 (nearest, ties to even) and return the uint16 bits.

    NaN becomes the canonical quiet NaN with its sign kept (0x7FC0 / 0xFFC0, the
    same bits :func:`flexq.arrays.to_paddle` gives on a device); infinities and
    signed zeros are kept. This is the one rounding step of every float32 ->
    bfloat16 result flexq produces on the CPU, so it runs over every weight: in
    chunks small enough that each chunk's several passes stay in cache, on the
    worker threads. ``out`` (C-contiguous uint16 of ``values``' shape, e.g. a
    target's memory) receives the bits instead of a new array.
    """
    x = np.ascontiguousarray(values, dtype=np.float32)
    if out is None:
        out = np.empty(x.shape, dtype=np.uint16)
    flat, bits = x.reshape(-1), out.reshape(-1)

    def work(starts: Sequence[int]) -> None:
        for start in starts:
            _round_chunk(flat[start : start + _ROUND_CHUNK], bits[start : start + _ROUND_CHUNK])

    run_parts(work, range(0, flat.size, _ROUND_CHUNK), 8)
    return out


#: Elements per rounding chunk: 1 MiB of float32 and its uint32 temporary stay
#: near a core's L2 cache; smaller chunks lose more to per-call overhead and
#: threads trading the GIL than they gain in cache hits (measured on this
#: 2-core machine: 64 Ki elements ran at half the speed).
_ROUND_CHUNK = 1 << 18


def _round_chunk(values: np.ndarray, out: np.ndarray) -> None:
    """Round one 1-D chunk of float32 ``values`` into ``out`` (uint16 bits)."""
    u = values.view(np.uint32)
    rounded = u >> 16
    rounded &= 1
    rounded += u
    rounded += 0x7FFF
    np.right_shift(rounded, 16, out=out, casting="unsafe")
    # max is NaN exactly when some value is: one read instead of a mask and a scan.
    if np.isnan(np.max(values)):
        nan = np.isnan(values)
        # Rounding a NaN's payload could carry into the sign or give an infinity.
        out[nan] = np.where(np.signbit(values[nan]), BF16_NEGATIVE_NAN, BF16_QUIET_NAN)


#: Canonical bfloat16 NaN bit patterns flexq writes (positive and negative).
BF16_QUIET_NAN = 0x7FC0
BF16_NEGATIVE_NAN = 0xFFC0
