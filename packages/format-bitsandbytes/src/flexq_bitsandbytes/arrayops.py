"""Array operations bitsandbytes decoding needs beyond :mod:`flexq.formatkit`, for numpy and Paddle.

- :meth:`BnbOps.pairs`: one lookup per packed byte yielding its two decoded
  codes (a [256, 2] table), element 2k from the high nibble;
- :meth:`BnbOps.const`: a float32 scalar on the array's device, so constants
  are multiplied and added as float32 tensors (Paddle's scalar ``scale`` op
  would add a +0.0 bias, turning -0.0 into +0.0);
- :meth:`BnbOps.host`: a small tensor (a code book) as numpy.

All exact, so the numpy and Paddle paths stay bit-identical.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from flexq.formatkit import ArrayOps, NumpyOps, PaddleOps, is_paddle


class NumpyBnbOps(NumpyOps):
    """The CPU path."""

    def pairs(self, table: np.ndarray, codes: Any) -> Any:
        # A pair of float32 is one 8-byte item: one gather per byte.
        wide = np.ascontiguousarray(table, dtype=np.float32).view(np.uint64).reshape(-1)
        flat = np.asarray(codes).reshape(-1)
        return wide[flat].view(np.float32)

    def const(self, like: Any, value: float) -> Any:
        return np.float32(value)

    def host(self, x: Any) -> np.ndarray:
        return np.asarray(x)


class PaddleBnbOps(PaddleOps):
    """The device path: Paddle ops on the device the codes live on."""

    def pairs(self, table: np.ndarray, codes: Any) -> Any:
        p = self._paddle
        t = p.to_tensor(np.ascontiguousarray(table, dtype=np.float32), place=codes.place)
        rows = p.gather(t, codes.astype("int64").reshape([-1]), axis=0)
        return rows.reshape([-1])

    def const(self, like: Any, value: float) -> Any:
        return self._paddle.to_tensor(np.float32(value), place=like.place)

    def host(self, x: Any) -> np.ndarray:
        return np.asarray(x.numpy())


class BnbOps(ArrayOps, Protocol):
    """:class:`flexq.formatkit.ArrayOps` plus the three bitsandbytes operations."""

    def pairs(self, table: np.ndarray, codes: Any) -> Any:
        """``table`` [256, 2] looked up by byte ``codes`` (any shape) -> flat float32 [2n]."""

    def const(self, like: Any, value: float) -> Any:
        """``value`` as a float32 scalar next to ``like``."""

    def host(self, x: Any) -> np.ndarray:
        """``x`` as a numpy array (for small tensors only)."""


_NUMPY = NumpyBnbOps()


def bnb_ops_for(x: object) -> BnbOps:
    """The operations for ``x``'s kind of array (Paddle tensor or numpy array)."""
    return PaddleBnbOps() if is_paddle(x) else _NUMPY
