"""Array operations the decoder needs beyond :class:`flexq.formatkit.ArrayOps`, on numpy and
Paddle alike.

Taking columns by index (act-order); packed codes come from the kit's one unpacker
(:func:`flexq.formatkit.unpack_into`, :meth:`ArrayOps.unpack_codes
<flexq.formatkit.ArrayOps.unpack_codes>`). All exact integer or data-movement
operations, so the numpy and Paddle versions agree bit for bit.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from flexq.formatkit import is_paddle


class CtOps(Protocol):
    """The operations :mod:`flexq_ct_int.decode` needs on one kind of array."""

    def take_columns(self, x: Any, index: Any) -> Any:
        """``x[:, index]`` for a 2-D ``x`` and an integer index vector."""

    def as_index(self, x: Any) -> Any:
        """An integer vector as int64 indices (same kind of array)."""

    def zeros(self, shape: tuple[int, ...], like: Any) -> Any:
        """float32 zeros of ``shape`` where ``like`` lives."""


class NumpyCtOps:
    """:class:`CtOps` on numpy arrays."""

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
