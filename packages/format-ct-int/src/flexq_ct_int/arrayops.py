"""Array operations the decoder needs beyond :class:`flexq.formatkit.ArrayOps`, on numpy and
Paddle alike.

Gathering codes by their bit positions in int32 words (widths that do not
divide 8; on numpy the kit's :func:`~flexq.formatkit.gather_codes`, and whole rows go
through the kit's ``unpack_into`` and ``ArrayOps.unpack``) and taking columns by index
(act-order). All exact integer or data-movement operations, so the numpy and Paddle
versions agree bit for bit.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from flexq.formatkit import gather_codes, is_paddle


class CtOps(Protocol):
    """The operations :mod:`flexq_ct_int.decode` needs on one kind of array."""

    def gather(self, words: Any, bitpos: np.ndarray, bits: int) -> Any:
        """The ``bits``-wide codes starting at bit ``bitpos[j]`` of each row of int32
        words ``[R, W]`` (a code may cross into the next word) as float32 ``[R, len(bitpos)]``."""

    def take_columns(self, x: Any, index: Any) -> Any:
        """``x[:, index]`` for a 2-D ``x`` and an integer index vector."""

    def as_index(self, x: Any) -> Any:
        """An integer vector as int64 indices (same kind of array)."""

    def zeros(self, shape: tuple[int, ...], like: Any) -> Any:
        """float32 zeros of ``shape`` where ``like`` lives."""


class NumpyCtOps:
    """:class:`CtOps` on numpy arrays."""

    def gather(self, words: Any, bitpos: np.ndarray, bits: int) -> Any:
        return gather_codes(np.asarray(words), bits, np.asarray(bitpos, np.int64))

    def take_columns(self, x: Any, index: Any) -> Any:
        return np.take(x, index, axis=1)

    def as_index(self, x: Any) -> Any:
        return np.asarray(x, dtype=np.int64)

    def zeros(self, shape: tuple[int, ...], like: Any) -> Any:
        return np.zeros(shape, np.float32)


class PaddleCtOps:
    """:class:`CtOps` on Paddle tensors, on the tensors' own device."""

    def __init__(self) -> None:
        import paddle

        self._paddle = paddle

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

    def as_index(self, x: Any) -> Any:
        return x.astype("int64")

    def zeros(self, shape: tuple[int, ...], like: Any) -> Any:
        return self._paddle.zeros(list(shape), dtype="float32").to(like.place)


_NUMPY = NumpyCtOps()


def ct_ops_for(x: object) -> CtOps:
    """The :class:`CtOps` for ``x``'s kind of array."""
    return PaddleCtOps() if is_paddle(x) else _NUMPY
