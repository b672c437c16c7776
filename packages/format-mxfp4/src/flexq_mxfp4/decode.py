"""The MXFP4 dequantization math, written once for numpy and Paddle arrays.

``value = E2M1(code) * 2^(scale - 127)`` in float32, exactly: every E2M1 value
and every E8M0 scale is a float32, and their product is rounded once by the
float32 multiply (it is exact except where it overflows to infinity, for
scales above 2^125, or for values below 2^-149, which cannot occur). Scale
0xFF is NaN, so its whole block is NaN; scale 0x00 is 2^-127, a float32
subnormal, kept as is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexq.formatkit import for_bands
from flexq_mxfp4.arrayops import mx_ops_for
from flexq_mxfp4.layout import BLOCK

#: E2M1 code (0..15) -> value; bit 3 is the sign.
E2M1_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=np.float32,
)

#: byte -> (element 2b from the low nibble, element 2b+1 from the high nibble).
PAIR_TABLE = np.stack(
    [E2M1_VALUES[np.arange(256) & 0x0F], E2M1_VALUES[np.arange(256) >> 4]], axis=-1
).astype(np.float32)

#: E8M0 byte -> 2^(byte - 127); 0xFF is NaN. ldexp in float64 then a cast is exact
#: for all 255 powers of two, including the subnormal 2^-127.
E8M0_VALUES = np.append(np.ldexp(1.0, np.arange(255) - 127), np.nan).astype(np.float32)


def dequantize(packed: Any, scales: Any, trim: int, size: int, out: Any = None) -> Any:
    """Decode a run of whole blocks along the last axis and cut out ``size`` elements.

    :param packed: codes as bytes, ``[..., nbytes]``; the run starts on a block
        boundary and holds whole blocks except possibly a partial last one.
    :param scales: E8M0 bytes, ``[..., ceil(2*nbytes / 32)]``.
    :param trim: elements of the first block to drop (the target's offset in it).
    :param size: elements to keep.
    :param out: None, or a C-contiguous numpy float32 array ``[..., size]`` to
        fill (used when the run is exactly whole blocks).
    :return: float32 ``[..., size]``, numpy or Paddle like the inputs.
    """
    ops = mx_ops_for(packed)
    lead = tuple(packed.shape[:-1])
    n = 2 * int(packed.shape[-1])
    nblk = int(scales.shape[-1])
    if (
        isinstance(packed, np.ndarray)
        and packed.flags.c_contiguous
        and n == nblk * BLOCK
        and trim == 0
        and size == n
    ):
        return _whole_blocks(packed, scales, out)
    values = ops.lut_pairs(PAIR_TABLE, packed)
    scale = ops.lut(E8M0_VALUES, scales)
    if n == nblk * BLOCK:
        # Broadcast one scale over its block: no repeated scale array is built.
        blocks = ops.reshape(values, (*lead, nblk, BLOCK))
        blocks = ops.mul_into(blocks, ops.reshape(scale, (*lead, nblk, 1)))
        values = ops.reshape(blocks, (*lead, n))
    else:
        # A partial last block (compressed-tensors rows not a multiple of 32).
        values = ops.mul_into(values, ops.repeat(scale, BLOCK, axis=-1)[..., :n])
    if trim == 0 and size == n:
        return values
    return values[..., trim : trim + size]


#: PAIR_TABLE rows as one 8-byte item each: a byte's two float32 values in one copy.
_PAIR_ITEMS = np.ascontiguousarray(PAIR_TABLE).view(np.uint64).reshape(256)


def _whole_blocks(packed: np.ndarray, scales: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """The numpy path for runs of whole blocks: band by band on the worker threads.

    Codes are viewed as ``[..., blocks, 16]`` and the result as 8-byte pairs of
    the same shape, so each block's scale lines up with its 16 bytes; a band is
    looked up (``take`` with ``clip`` skips bounds checks: a byte cannot exceed
    255) and scaled while it is still in cache.
    """
    lead, nblk = tuple(packed.shape[:-1]), int(scales.shape[-1])
    codes = packed.reshape((*lead, nblk, BLOCK // 2))
    scale = E8M0_VALUES[np.asarray(scales)].reshape((*lead, nblk, 1))
    result = np.empty((*lead, nblk * BLOCK), np.float32) if out is None else out
    pairs = result.reshape((*lead, nblk, BLOCK)).view(np.uint64)

    def work(c: np.ndarray, o: np.ndarray, s: np.ndarray) -> None:
        np.take(_PAIR_ITEMS, c, out=o, mode="clip")
        values = o.view(np.float32)
        # Products above float32's range are infinity by definition: no warning.
        with np.errstate(over="ignore", invalid="ignore"):
            values *= s

    for_bands(work, codes, pairs, scale)
    return result
