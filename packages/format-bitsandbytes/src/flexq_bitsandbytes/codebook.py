"""The code books bitsandbytes 4-bit and double quantization use, as float32 tables.

For the decoder (:mod:`flexq_bitsandbytes.decode`), the encoder and the checks
on a checkpoint's stored ``quant_map``. The values are bitsandbytes 0.50.2's:

- NF4: the 16 NormalFloat levels ``get_4bit_type("nf4")`` lists (already in
  [-1, 1], so its division by the largest magnitude changes nothing).
- FP4: bitsandbytes' own 1-2-1 float layout (exponent bias 2, code 1 is
  0.0625) divided by 12, its largest magnitude. Code 8 (sign bit, zero
  magnitude) is +0.0, as in the ``quant_map`` bnb stores, its pure-PyTorch path
  and its AVX-512 CPU kernel; its scalar CPU kernel and its CUDA kernel decode
  the sign bit and give -0.0 there (equal values, other zero sign).
- The "dynamic" 8-bit map (``create_dynamic_map(signed=True)``) that double
  quantization codes the absmax values with; bnb writes it into every
  checkpoint as ``nested_quant_map`` and the decoder uses the stored one.
"""

from __future__ import annotations

import numpy as np

NF4_VALUES = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)

#: bnb's FP4 magnitudes in code order (bit 3 is the sign), before the division by 12.
_FP4_RAW = np.array([0.0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0], dtype=np.float32)
#: ``0.0 - x`` rather than ``-x``: code 8 is +0.0 (see above).
FP4_VALUES = np.concatenate([_FP4_RAW, np.float32(0.0) - _FP4_RAW]) / np.float32(12.0)

CODE_BOOKS: dict[str, np.ndarray] = {"nf4": NF4_VALUES, "fp4": FP4_VALUES}


def dynamic_map() -> np.ndarray:
    """bitsandbytes' signed dynamic 8-bit map (256 sorted float32 values in [-1, 1]).

    Seven decades ``10^(i-6)`` for i = 0..6, each holding the midpoints of
    ``2^i + 1`` evenly spaced points on [0.1, 1] with both signs, plus 0 and 1.
    The arithmetic follows PyTorch's float32 ``linspace`` (float32 step,
    points computed in float64 from both ends) and float32 products, so the map
    equals bnb's bit for bit.
    """
    parts = []
    for i in range(7):
        k = 2**i + 1
        start, end = np.float32(0.1), np.float32(1.0)
        step = np.float64((end - start) / np.float32(k - 1))
        at = np.arange(k, dtype=np.float64)
        points = np.where(
            at < k // 2, np.float64(start) + step * at, np.float64(end) - step * (k - 1 - at)
        ).astype(np.float32)
        means = (points[:-1] + points[1:]) / np.float32(2.0)
        decade = np.float32(10.0 ** (i - 6)) * means
        parts += [decade, -decade]
    parts.append(np.array([0.0, 1.0], dtype=np.float32))
    return np.sort(np.concatenate(parts)).astype(np.float32)
