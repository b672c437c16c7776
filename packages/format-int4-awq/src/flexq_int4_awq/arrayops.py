"""Two array operations :mod:`flexq.formatkit` lacks, over numpy arrays and Paddle tensors.

For :mod:`flexq_int4_awq.dequant`: unpacking eight 4-bit codes per int32
straight into float32 (instead of eight :meth:`~flexq.formatkit.ArrayOps.shift_and`
calls, a stack and a conversion), optionally into the transposed layout so
the GEMM [in, out] storage comes out as [out, in] without a float32
transpose, and a 2-D transpose for the small scale tables.
Both are exact integer or data-movement operations, so the numpy and Paddle
versions agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from flexq.formatkit import is_paddle


class Int4Ops(Protocol):
    """Operations the AWQ dequantizer needs beyond :class:`flexq.formatkit.ArrayOps`."""

    def unpack_int4(self, packed: Any, slots: Sequence[int], transposed: bool) -> Any:
        """Unpack int32 words [R, C] into float32 codes.

        Element j of each group of eight comes from nibble ``slots[j]`` (bits
        4*slot .. 4*slot+3), read as unsigned. Result [R, 8C], or [8C, R]
        when ``transposed`` (the codes of word (r, c) land in rows 8c..8c+7 of
        column r).
        """

    def transpose(self, x: Any) -> Any:
        """A 2-D array with its axes swapped (contiguous)."""


class NumpyInt4Ops:
    """:class:`Int4Ops` on numpy arrays."""

    def unpack_int4(self, packed: Any, slots: Sequence[int], transposed: bool) -> Any:
        words = np.asarray(packed).view(np.uint32)
        rows, cols = words.shape
        if transposed:
            # Transposing the int32 words first (1/8 of the output) keeps every
            # pass below contiguous; unpacking from the strided view is 4x slower.
            src = np.ascontiguousarray(words.T)
            out = np.empty((cols, 8, rows), dtype=np.float32)
        else:
            src = words
            out = np.empty((rows, cols, 8), dtype=np.float32)
        nibble = np.empty_like(src)
        for j, slot in enumerate(slots):
            np.right_shift(src, np.uint32(4 * slot), out=nibble)
            np.bitwise_and(nibble, np.uint32(0xF), out=nibble)
            if transposed:
                out[:, j, :] = nibble
            else:
                out[:, :, j] = nibble
        return out.reshape((cols * 8, rows) if transposed else (rows, cols * 8))

    def transpose(self, x: Any) -> Any:
        return np.ascontiguousarray(np.asarray(x).T)


class PaddleInt4Ops:
    """:class:`Int4Ops` on Paddle tensors, on the tensors' own device."""

    def __init__(self) -> None:
        import paddle

        self._paddle = paddle

    def unpack_int4(self, packed: Any, slots: Sequence[int], transposed: bool) -> Any:
        p = self._paddle
        place = packed.place
        # int64 holds every int32 bit pattern as a non-negative number once the
        # sign extension is masked off, so the right shift is a logical one.
        words = p.bitwise_and(
            packed.astype("int64"), p.to_tensor(0xFFFFFFFF, dtype="int64", place=place)
        )
        rows, cols = words.shape
        shifts = p.to_tensor([4 * s for s in slots], dtype="int64", place=place)
        if transposed:
            codes = p.bitwise_right_shift(
                words.T.unsqueeze(1), shifts.reshape([8, 1]), is_arithmetic=False
            )
            shape = [cols * 8, rows]
        else:
            codes = p.bitwise_right_shift(words.unsqueeze(-1), shifts, is_arithmetic=False)
            shape = [rows, cols * 8]
        codes = p.bitwise_and(codes, p.to_tensor(0xF, dtype="int64", place=place))
        return codes.astype("float32").reshape(shape)

    def transpose(self, x: Any) -> Any:
        return self._paddle.transpose(x, [1, 0])


_NUMPY = NumpyInt4Ops()


def int4_ops_for(x: object) -> Int4Ops:
    """The :class:`Int4Ops` for ``x``'s kind of array."""
    return PaddleInt4Ops() if is_paddle(x) else _NUMPY
