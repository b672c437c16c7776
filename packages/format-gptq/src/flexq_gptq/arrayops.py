"""The array operations the GPTQ decoder needs beyond :class:`flexq.formatkit.ArrayOps`.

Unpacking ``bits``-bit codes from int32 words along either axis (with the GPTQ
v1 zero offset undone on the words or on the fields; on numpy through the kit's one
unpacker, :func:`flexq.formatkit.unpack_into`) and taking rows by a group index, for
numpy arrays and Paddle tensors. All are exact
integer or data-movement operations, so both give identical bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from flexq.formatkit import is_paddle, unpack_into
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
    """:class:`GptqOps` on numpy arrays: the kit's one unpacker (:func:`unpack_into`) on
    the rows of the words packed along the last axis."""

    def unpack(
        self, words: Any, bits: int, axis: int, word_add: Sequence[int], field_add: int
    ) -> Any:
        p = Packing(bits)
        w = np.asarray(words).view(np.uint32)
        rows = np.ascontiguousarray(w if axis == 1 else w.T)
        if any(word_add):
            add = np.tile(np.asarray(word_add, np.uint32), rows.shape[1] // p.unit_words)
            rows = rows + add  # uint32 arithmetic wraps modulo 2**32
        codes = np.empty((rows.shape[0], rows.shape[1] // p.unit_words * p.unit_codes), np.float32)
        unpack_into(rows, bits, codes)
        if field_add:
            # (c + a) mod 2**bits of small integers: exact in float32.
            codes = np.remainder(codes + np.float32(field_add), np.float32(1 << bits))
        return codes if axis == 1 else np.ascontiguousarray(codes.T)

    def take_rows(self, x: Any, index: np.ndarray) -> Any:
        return np.take(np.asarray(x), index, axis=0)


class PaddleGptqOps:
    """:class:`GptqOps` on Paddle tensors, on the tensors' own device."""

    def __init__(self) -> None:
        import paddle

        self._paddle = paddle

    def _const(self, value: int, place: Any) -> Any:
        return self._paddle.to_tensor(value, dtype="int64", place=place)

    def unpack(
        self, words: Any, bits: int, axis: int, word_add: Sequence[int], field_add: int
    ) -> Any:
        pd = self._paddle
        p = Packing(bits)
        place = words.place
        # int64 holds every int32 bit pattern as a non-negative number once the
        # sign extension is masked off, so shifts are logical.
        full = self._const(0xFFFFFFFF, place)
        w = pd.bitwise_and(words.astype("int64"), full)
        if axis == 1:
            w = pd.transpose(w, [1, 0])
        n, cols = w.shape
        units = w.reshape([n // p.unit_words, p.unit_words, cols])
        if any(word_add):
            add = pd.to_tensor(list(word_add), dtype="int64", place=place).reshape([1, -1, 1])
            units = pd.bitwise_and(units + add, full)
        mask = self._const(p.mask, place)
        codes = []
        for word, shift, low in p.fields():
            c = pd.bitwise_right_shift(
                units[:, word], self._const(shift, place), is_arithmetic=False
            )
            if low < bits:
                c = pd.bitwise_or(
                    c, pd.bitwise_left_shift(units[:, word + 1], self._const(low, place))
                )
            if field_add:
                c = c + self._const(field_add, place)
            codes.append(pd.bitwise_and(c, mask))
        flat = pd.stack(codes, axis=1).reshape([-1, cols]).astype("float32")
        return pd.transpose(flat, [1, 0]) if axis == 1 else flat

    def take_rows(self, x: Any, index: np.ndarray) -> Any:
        pd = self._paddle
        return pd.index_select(x, pd.to_tensor(index, dtype="int64", place=x.place), axis=0)


_NUMPY = NumpyGptqOps()


def gptq_ops_for(x: object) -> GptqOps:
    """The :class:`GptqOps` for ``x``'s kind of array."""
    return PaddleGptqOps() if is_paddle(x) else _NUMPY
