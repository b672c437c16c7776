"""The one dtype table: every safetensors dtype string and how flexq holds, moves and names it.

For the header parser (byte lengths), the reader (the numpy storage array), the
writer (safetensors' own dtype names), the FlexCheckpoint source (the Paddle
dtype a component travels as) and the composer (the Paddle dtype of a
passthrough tensor). Every other module reads dtypes from here.

Element formats numpy and Paddle cannot hold (F8_*, F4, F6) are stored as raw
uint8 bytes, BF16 as its raw uint16 bit pattern.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Kind = Literal["float", "int", "bool", "complex", "element"]


@dataclass(frozen=True)
class DType:
    """One safetensors dtype string.

    :ivar name: the header string (``"BF16"``, ``"F8_E4M3"`` ...).
    :ivar bits: bits per logical element on disk.
    :ivar numpy: numpy dtype of the array the reader returns (the storage dtype).
    :ivar paddle: Paddle dtype name of the values, None when Paddle has no such
        dtype and a format plugin must decode the raw bytes.
    :ivar transport: Paddle dtype the tensor travels as through FlexCheckpoint
        (one-byte element formats as uint8), None when it cannot travel.
    :ivar spec: the dtype name safetensors' ``TensorSpec`` takes (writer), None
        when flexq cannot write it.
    :ivar kind: float, int, bool, complex, or an element format for a plugin.
    :ivar elems_per_item: logical elements per storage item (2 for F4, whose
        header shape counts elements while the reader returns bytes).
    """

    name: str
    bits: int
    numpy: np.dtype[np.generic]
    paddle: str | None
    transport: str | None
    spec: str | None
    kind: Kind
    elems_per_item: int = 1

    @property
    def itemsize(self) -> int:
        """Bytes per storage item."""
        return int(self.numpy.itemsize)


def _d(
    name: str,
    bits: int,
    numpy: str,
    paddle: str | None,
    transport: str | None,
    spec: str | None,
    kind: Kind,
    per_item: int = 1,
) -> DType:
    return DType(name, bits, np.dtype(numpy), paddle, transport, spec, kind, per_item)


_TABLE = (
    _d("BOOL", 8, "bool", "bool", "bool", "bool", "bool"),
    _d("U8", 8, "uint8", "uint8", "uint8", "uint8", "int"),
    _d("I8", 8, "int8", "int8", "int8", "int8", "int"),
    _d("U16", 16, "uint16", None, None, "uint16", "int"),
    _d("I16", 16, "int16", "int16", "int16", "int16", "int"),
    _d("U32", 32, "uint32", None, None, "uint32", "int"),
    _d("I32", 32, "int32", "int32", "int32", "int32", "int"),
    _d("U64", 64, "uint64", None, None, "uint64", "int"),
    _d("I64", 64, "int64", "int64", "int64", "int64", "int"),
    _d("F16", 16, "float16", "float16", "float16", "float16", "float"),
    _d("BF16", 16, "uint16", "bfloat16", "bfloat16", "bfloat16", "float"),
    _d("F32", 32, "float32", "float32", "float32", "float32", "float"),
    _d("F64", 64, "float64", "float64", "float64", "float64", "float"),
    _d("C64", 64, "complex64", "complex64", None, "complex64", "complex"),
    # One-byte and sub-byte element formats: raw bytes for a format plugin.
    _d("F8_E4M3", 8, "uint8", None, "uint8", "float8_e4m3fn", "element"),
    _d("F8_E5M2", 8, "uint8", None, "uint8", "float8_e5m2", "element"),
    _d("F8_E8M0", 8, "uint8", None, "uint8", "float8_e8m0fnu", "element"),
    _d("F8_E4M3FNUZ", 8, "uint8", None, None, "float8_e4m3fnuz", "element"),
    _d("F8_E5M2FNUZ", 8, "uint8", None, None, "float8_e5m2fnuz", "element"),
    _d("F4", 4, "uint8", None, None, "float4_e2m1fn_x2", "element", per_item=2),
    # F6 packs 4 elements in 3 bytes; readable whole only (see Checkpoint.read).
    _d("F6_E2M3", 6, "uint8", None, None, None, "element"),
    _d("F6_E3M2", 6, "uint8", None, None, None, "element"),
)

#: safetensors dtype string -> its row.
DTYPES: dict[str, DType] = {d.name: d for d in _TABLE}
#: Paddle dtype name -> the safetensors dtype holding it (bfloat16 -> BF16 ...).
BY_PADDLE: dict[str, DType] = {d.paddle: d for d in _TABLE if d.paddle is not None}
#: numpy dtype of a plain array -> the safetensors dtype it is written as.
BY_NUMPY: dict[np.dtype[np.generic], DType] = {
    d.numpy: d for d in _TABLE if d.kind != "element" and d.name != "BF16" and d.paddle
}
#: Paddle dtype names a float target may have.
FLOAT_DTYPES = ("float32", "bfloat16", "float16")


def dtype(name: str) -> DType:
    """The row of safetensors dtype ``name`` (KeyError when unknown)."""
    return DTYPES[name]


def paddle_dtype(name: str) -> DType:
    """The row holding Paddle dtype name ``name`` (ValueError when none does)."""
    try:
        return BY_PADDLE[name]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r}") from None


def paddle_dtype_name(value: object) -> str:
    """``paddle.bfloat16`` / ``"bfloat16"`` / ``paddle.float32`` -> ``"bfloat16"`` ..."""
    return str(value).removeprefix("paddle.").removeprefix("VarType.").lower()


def byte_length(name: str, shape: tuple[int, ...]) -> int | None:
    """Bytes a tensor of dtype ``name`` and ``shape`` occupies, None if not whole bytes.

    Python integers: a hostile shape cannot overflow, and nothing is allocated.
    """
    count = 1
    for dim in shape:
        count *= dim
    bits = count * DTYPES[name].bits
    return bits // 8 if bits % 8 == 0 else None
