"""The array operations the GPTQ decoder needs beyond :class:`flexq.formatkit.ArrayOps`.

Unpacking ``bits``-bit codes from int32 words along either axis (with the GPTQ
v1 zero offset undone on the words or on the fields; the codes come from the kit's
one unpacker, :meth:`ArrayOps.unpack_codes <flexq.formatkit.ArrayOps.unpack_codes>`)
and taking rows by a group index, for numpy arrays and Paddle tensors. All are exact
integer or data-movement operations, so both give identical bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from flexq.formatkit import NumpyOps, PaddleOps, is_paddle, unpack_into
from flexq_gptq.packing import Packing


class GptqOps(Protocol):
    """Operations the GPTQ decoder needs beyond :class:`flexq.formatkit.ArrayOps`."""

    def unpack(
        self, words: Any, bits: int, axis: int, word_add: Sequence[int], field_add: int
    ) -> Any:
        """Float32 codes of int32 ``words`` (2-D, packed along ``axis``, whole units).

        Each word of a unit first gets ``word_add[w]`` added modulo 2**32 (carries
        cross fields, as a whole-word addition does); each code then gets
        ``field_add`` added modulo ``2**bits``.
        """

    def take_rows(self, x: Any, index: np.ndarray) -> Any:
        """``x[index]`` along axis 0 (``index`` is a host int64 array)."""


class NumpyGptqOps:
    """:class:`GptqOps` on numpy arrays: the kit's one unpacker on the rows of the words
    packed along the last axis."""

    def unpack(
        self, words: Any, bits: int, axis: int, word_add: Sequence[int], field_add: int
    ) -> Any:
        p = Packing(bits)
        w = np.asarray(words).view(np.uint32)
        rows = np.ascontiguousarray(w if axis == 1 else w.T)
        if any(word_add):
            add = np.tile(np.asarray(word_add, np.uint32), rows.shape[1] // p.unit_words)
            rows = rows + add  # uint32 arithmetic wraps modulo 2**32
        count = rows.shape[1] // p.unit_words * p.unit_codes
        if field_add:
            # (c + a) mod 2**bits on the codes as int32 (the kit's unpacker writes them
            # as indexes): two integer passes instead of a float remainder.
            ints = np.empty((rows.shape[0], count), np.int32)
            unpack_into(rows, bits, ints)
            ints += field_add
            ints &= p.mask
            codes = ints.astype(np.float32)
        else:
            codes = _NUMPY_OPS.unpack_codes(rows, bits, count)
        return codes if axis == 1 else np.ascontiguousarray(codes.T)

    def take_rows(self, x: Any, index: np.ndarray) -> Any:
        return np.take(np.asarray(x), index, axis=0)


class PaddleGptqOps:
    """:class:`GptqOps` on Paddle tensors, on the tensors' own device: the kit's
    :meth:`PaddleOps.unpack_codes <flexq.formatkit.PaddleOps.unpack_codes>` on the rows
    of the words packed along the last axis."""

    def __init__(self) -> None:
        import paddle

        self._paddle = paddle
        self._ops = PaddleOps()

    def unpack(
        self, words: Any, bits: int, axis: int, word_add: Sequence[int], field_add: int
    ) -> Any:
        pd = self._paddle
        p = Packing(bits)
        place = words.place
        # int64 holds every int32 bit pattern as a non-negative number once the sign
        # extension is masked off: the whole-word addition below wraps modulo 2**32.
        full = pd.to_tensor(0xFFFFFFFF, dtype="int64", place=place)
        w = pd.bitwise_and(words.astype("int64"), full)
        if axis == 0:
            w = pd.transpose(w, [1, 0])
        width = int(w.shape[1])
        if any(word_add):
            add = np.tile(np.asarray(word_add, np.int64), width // p.unit_words)
            w = pd.bitwise_and(w + pd.to_tensor(add, place=place).reshape([1, -1]), full)
        codes = self._ops.unpack_codes(w, bits, width // p.unit_words * p.unit_codes)
        if field_add:
            codes = pd.remainder(codes + float(field_add), pd.full_like(codes, 1 << bits))
        return pd.transpose(codes, [1, 0]) if axis == 0 else codes

    def take_rows(self, x: Any, index: np.ndarray) -> Any:
        pd = self._paddle
        return pd.index_select(x, pd.to_tensor(index, dtype="int64", place=x.place), axis=0)


_NUMPY_OPS = NumpyOps()
_NUMPY = NumpyGptqOps()


def gptq_ops_for(x: object) -> GptqOps:
    """The :class:`GptqOps` for ``x``'s kind of array."""
    return PaddleGptqOps() if is_paddle(x) else _NUMPY
