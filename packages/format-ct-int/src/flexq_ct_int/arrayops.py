"""Array operations the decoder needs beyond :class:`flexq.formatkit.ArrayOps`, on numpy and
Paddle alike.

Unpacking int32 words into their codes (along dim 1 for weights, dim 0 for
zero points; whole words for widths dividing 8, any bit positions for the
others) and gathering columns by index (act-order). All exact integer or
data-movement operations, so the numpy and Paddle versions agree bit for bit.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from flexq.formatkit import is_paddle, lookup_into
from flexq_ct_int.packing import byte_table


class CtOps(Protocol):
    """The operations :mod:`flexq_ct_int.decode` needs on one kind of array."""

    def unpack(self, words: Any, bits: int) -> Any:
        """int32 words ``[R, W]`` -> their unsigned codes as float32 ``[R, W * 32/bits]``."""

    def unpack_along_rows(self, words: Any, bits: int) -> Any:
        """int32 words ``[W, C]`` packed along dim 0 -> float32 codes ``[W * 32/bits, C]``."""

    def gather(self, words: Any, bitpos: np.ndarray, bits: int) -> Any:
        """The ``bits``-wide codes starting at bit ``bitpos[j]`` of each row of int32
        words ``[R, W]`` (a code may cross into the next word) as float32 ``[R, len(bitpos)]``."""

    def take_columns(self, x: Any, index: Any) -> Any:
        """``x[:, index]`` for a 2-D ``x`` and an integer index vector."""

    def transpose(self, x: Any) -> Any:
        """A 2-D array with its axes swapped (contiguous)."""

    def as_index(self, x: Any) -> Any:
        """An integer vector as int64 indices (same kind of array)."""

    def zeros(self, shape: tuple[int, ...], like: Any) -> Any:
        """float32 zeros of ``shape`` where ``like`` lives."""


class NumpyCtOps:
    """:class:`CtOps` on numpy arrays (a byte-table lookup per word row)."""

    def unpack(self, words: Any, bits: int) -> Any:
        w = np.ascontiguousarray(words, dtype=np.int32)
        rows, width = w.shape
        out = np.empty((rows, width * (32 // bits)), dtype=np.float32)
        unpack_into(w, bits, out)
        return out

    def unpack_along_rows(self, words: Any, bits: int) -> Any:
        return np.ascontiguousarray(self.unpack(np.asarray(words).T, bits).T)

    def gather(self, words: Any, bitpos: np.ndarray, bits: int) -> Any:
        w = np.asarray(words).view(np.uint32).astype(np.uint64)
        w = np.concatenate([w, np.zeros((w.shape[0], 1), np.uint64)], axis=1)
        word = bitpos // 32
        both = w[:, word] | (w[:, word + 1] << np.uint64(32))
        codes = (both >> (bitpos % 32).astype(np.uint64)) & np.uint64((1 << bits) - 1)
        return codes.astype(np.float32)

    def take_columns(self, x: Any, index: Any) -> Any:
        return np.take(x, index, axis=1)

    def transpose(self, x: Any) -> Any:
        return np.ascontiguousarray(np.asarray(x).T)

    def as_index(self, x: Any) -> Any:
        return np.asarray(x, dtype=np.int64)

    def zeros(self, shape: tuple[int, ...], like: Any) -> Any:
        return np.zeros(shape, np.float32)


def unpack_into(words: np.ndarray, bits: int, out: np.ndarray, minus: float = 0.0) -> None:
    """Unpack C-contiguous int32 words ``[R, W]`` into a C-contiguous float32 ``out``
    ``[R, W * 32/bits]``, each code less ``minus`` (a small integer, so exact).

    Each byte's codes come from one table lookup: two float32 codes as one
    8-byte item for 4 bits (which numpy gathers fastest), byte pairs through
    the core's pair table for 8 bits.
    """
    if not np.little_endian:
        words = words.astype("<i4")
    raw = words.view(np.uint8)
    table = _tables(bits, minus)
    if bits == 4:
        np.take(table.view(np.uint64).reshape(256), raw, out=out.view(np.uint64), mode="clip")
    elif bits == 8:
        lookup_into(table.reshape(256), raw, out)
    else:
        per = 8 // bits
        np.take(table, raw, axis=0, out=out.reshape(*raw.shape, per), mode="clip")


_TABLES: dict[tuple[int, float], np.ndarray] = {}


def _tables(bits: int, minus: float) -> np.ndarray:
    """:func:`byte_table` less ``minus``, built once per (bits, minus)."""
    table = _TABLES.get((bits, minus))
    if table is None:
        table = np.ascontiguousarray(byte_table(bits) - np.float32(minus), dtype=np.float32)
        _TABLES[bits, minus] = table
    return table


class PaddleCtOps:
    """:class:`CtOps` on Paddle tensors, on the tensors' own device."""

    def __init__(self) -> None:
        import paddle

        self._paddle = paddle

    def unpack(self, words: Any, bits: int) -> Any:
        p = self._paddle
        place = words.place
        k = 32 // bits
        # int64 holds every int32 bit pattern as a non-negative number once the
        # sign extension is masked off, so the right shift is a logical one.
        wide = p.bitwise_and(
            words.astype("int64"), p.to_tensor(0xFFFFFFFF, dtype="int64", place=place)
        )
        rows, width = wide.shape
        shifts = p.to_tensor([bits * s for s in range(k)], dtype="int64", place=place)
        codes = p.bitwise_right_shift(wide.unsqueeze(-1), shifts, is_arithmetic=False)
        codes = p.bitwise_and(codes, p.to_tensor((1 << bits) - 1, dtype="int64", place=place))
        return codes.astype("float32").reshape([rows, width * k])

    def unpack_along_rows(self, words: Any, bits: int) -> Any:
        p = self._paddle
        return p.transpose(self.unpack(p.transpose(words, [1, 0]), bits), [1, 0])

    def gather(self, words: Any, bitpos: np.ndarray, bits: int) -> Any:
        p = self._paddle
        place = words.place
        wide = p.bitwise_and(
            words.astype("int64"), p.to_tensor(0xFFFFFFFF, dtype="int64", place=place)
        )
        wide = p.concat([wide, p.zeros([wide.shape[0], 1], dtype="int64").to(place)], axis=1)
        word = p.to_tensor(bitpos // 32, dtype="int64", place=place)
        lo = p.index_select(wide, word, axis=1)
        hi = p.index_select(wide, word + 1, axis=1)
        # hi << 32 may wrap into the sign bit; only bits below 40 are kept.
        both = p.bitwise_or(
            lo, p.bitwise_left_shift(hi, p.to_tensor(32, dtype="int64", place=place))
        )
        shift = p.to_tensor(bitpos % 32, dtype="int64", place=place)
        codes = p.bitwise_right_shift(both, shift, is_arithmetic=False)
        codes = p.bitwise_and(codes, p.to_tensor((1 << bits) - 1, dtype="int64", place=place))
        return codes.astype("float32")

    def take_columns(self, x: Any, index: Any) -> Any:
        return self._paddle.index_select(x, index, axis=1)

    def transpose(self, x: Any) -> Any:
        return self._paddle.transpose(x, [1, 0])

    def as_index(self, x: Any) -> Any:
        return x.astype("int64")

    def zeros(self, shape: tuple[int, ...], like: Any) -> Any:
        return self._paddle.zeros(list(shape), dtype="float32").to(like.place)


_NUMPY = NumpyCtOps()


def ct_ops_for(x: object) -> CtOps:
    """The :class:`CtOps` for ``x``'s kind of array."""
    return PaddleCtOps() if is_paddle(x) else _NUMPY
