"""Element-format tables: the float32 value of every code of E2M1, E4M3FN and E8M0.

For formats that decode these elements (FP8, MXFP4, NVFP4 and plugins): one
definition each, as numpy float32 tables indexed by the code.
"""

from __future__ import annotations

import numpy as np

#: E2M1 code (0..15) -> value; bit 3 is the sign. No infinity or NaN, max +-6.
E2M1_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=np.float32,
)


def nibble_pairs(values: np.ndarray, *, high_first: bool = False) -> np.ndarray:
    """byte -> the two 4-bit codes it holds, decoded by ``values`` (16 entries): [256, 2]
    float32, so one lookup per byte decodes two elements (with
    :meth:`ArrayOps.lut_pairs <flexq.formatkit.ArrayOps.lut_pairs>` or, as 8-byte items,
    :func:`flexq.formatkit.pair_items`).

    :param high_first: element 2b sits in the HIGH nibble of byte b (bitsandbytes);
        by default in the LOW nibble (OCP MX, gpt-oss, compressed-tensors, NVFP4).
    """
    table = np.asarray(values, dtype=np.float32)
    byte = np.arange(256)
    low, high = table[byte & 0x0F], table[byte >> 4]
    return np.stack([high, low] if high_first else [low, high], axis=-1).astype(np.float32)


#: byte -> (E2M1 of its low nibble, E2M1 of its high nibble): element 2b sits in the
#: LOW nibble of byte b (OCP MX, gpt-oss, compressed-tensors, NVFP4). [256, 2].
E2M1_PAIRS = nibble_pairs(E2M1_VALUES)


def _e4m3_table() -> np.ndarray:
    """float32 value of every E4M3FN byte; 0x7F / 0xFF are NaN (sign kept), no infinities."""
    codes = np.arange(256, dtype=np.uint32)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = (codes & 0x7).astype(np.float64)
    normal = (1.0 + man / 8.0) * np.exp2(exp.astype(np.float64) - 7.0)
    subnormal = man * 2.0**-9
    table = (sign * np.where(exp == 0, subnormal, normal)).astype(np.float32)
    nan = (exp == 0xF) & ((codes & 0x7) == 0x7)
    table[nan] = np.copysign(np.float32(np.nan), sign[nan]).astype(np.float32)
    return table


#: E4M3FN byte -> float32 (256 entries).
E4M3_TO_FLOAT32 = _e4m3_table()
#: E8M0 byte -> 2^(byte - 127); 0xFF is NaN; 0x00 is the float32 subnormal 2^-127.
#: ldexp in float64 then a cast is exact for all 255 powers of two.
E8M0_TO_FLOAT32 = np.append(np.ldexp(1.0, np.arange(255) - 127), np.nan).astype(np.float32)
