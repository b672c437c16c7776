"""Two array operations MXFP4 needs beyond :mod:`flexq.formatkit`, for numpy and Paddle alike.

- :meth:`MxOps.lut_pairs`: one lookup per packed byte yielding its two decoded
  elements (a 256 x 2 table), so a byte is decoded without splitting nibbles.
- :meth:`MxOps.mul_into`: ``a * b`` that may reuse ``a``'s memory (numpy
  multiplies in place, saving a pass over the float32 output).

Both are exact, so the numpy and Paddle paths stay bit-identical. Candidates to
move into :mod:`flexq.formatkit`.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from flexq.formatkit import ArrayOps, NumpyOps, PaddleOps, is_paddle


class NumpyMxOps(NumpyOps):
    """The CPU path."""

    def lut_pairs(self, table: np.ndarray, codes: Any) -> Any:
        """``table`` [256, 2] float32 looked up by byte ``codes`` [..., n] -> [..., 2n]."""
        # A pair of float32 is one 8-byte item: a single fancy-index gather with
        # uint8 indexes is ~2x faster than np.take on a [256, 2] table.
        wide = np.ascontiguousarray(table, dtype=np.float32).view(np.uint64).reshape(-1)
        return wide[codes].view(np.float32)

    def mul_into(self, a: Any, b: Any) -> Any:
        """``a * b`` (broadcast), written into ``a``."""
        # Products above float32's range are infinity by definition: no warning
        # (a NaN scale is reported once, by the plugin's ScaleWarning).
        with np.errstate(over="ignore", invalid="ignore"):
            return np.multiply(a, b, out=a)


class PaddleMxOps(PaddleOps):
    """The device path: Paddle ops on the device the codes live on."""

    def lut_pairs(self, table: np.ndarray, codes: Any) -> Any:
        p = self._paddle
        t = p.to_tensor(np.ascontiguousarray(table, dtype=np.float32), place=codes.place)
        rows = p.gather(t, codes.astype("int64").reshape([-1]), axis=0)
        return rows.reshape([*codes.shape[:-1], 2 * codes.shape[-1]])

    def mul_into(self, a: Any, b: Any) -> Any:
        return a * b


class MxOps(ArrayOps, Protocol):
    """:class:`flexq.formatkit.ArrayOps` plus the two MXFP4 operations."""

    def lut_pairs(self, table: np.ndarray, codes: Any) -> Any:
        """``table`` [256, 2] looked up by byte ``codes`` [..., n] -> float32 [..., 2n]."""

    def mul_into(self, a: Any, b: Any) -> Any:
        """``a * b`` (broadcast); may overwrite ``a``."""


_NUMPY = NumpyMxOps()


def mx_ops_for(x: object) -> MxOps:
    """The operations for ``x``'s kind of array (Paddle tensor or numpy array)."""
    return PaddleMxOps() if is_paddle(x) else _NUMPY
