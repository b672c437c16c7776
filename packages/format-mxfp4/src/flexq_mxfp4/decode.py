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


def dequantize(packed: Any, scales: Any, trim: int, size: int) -> Any:
    """Decode a run of whole blocks along the last axis and cut out ``size`` elements.

    :param packed: codes as bytes, ``[..., nbytes]``; the run starts on a block
        boundary and holds whole blocks except possibly a partial last one.
    :param scales: E8M0 bytes, ``[..., ceil(2*nbytes / 32)]``.
    :param trim: elements of the first block to drop (the target's offset in it).
    :param size: elements to keep.
    :return: float32 ``[..., size]``, numpy or Paddle like the inputs.
    """
    ops = mx_ops_for(packed)
    lead = tuple(packed.shape[:-1])
    n = 2 * int(packed.shape[-1])
    nblk = int(scales.shape[-1])
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
