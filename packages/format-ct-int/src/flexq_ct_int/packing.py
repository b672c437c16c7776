"""compressed-tensors' int32 packing of small integer codes, for the decoder and the encoder.

``pack_to_int32`` (compressed-tensors 0.19.0) stores each code ``q`` as the
unsigned ``q + 2^(bits-1)`` and packs a row LSB-first: element ``j`` of a row
occupies bits ``j*bits .. j*bits+bits-1`` of the row's bit stream, the stream
cut into little-endian int32 words, the last word zero-padded; a row of ``n``
codes takes ``ceil(n*bits/32)`` words. Weights are packed along ``in`` (dim 1),
zero points along ``out`` (dim 0: the same packing of the transposed array).

Only widths that divide 32 (1, 2, 4, 8 bits) are read: for them a word holds
``32 / bits`` whole codes and every compressed-tensors release packs alike.
For 3, 5, 6 and 7 bits compressed-tensors 0.19 packs densely across word
boundaries while earlier releases packed ``32 // bits`` codes per word and
wasted the rest, so the same header can mean two layouts.
"""

from __future__ import annotations

import numpy as np

#: Code widths whose packing every compressed-tensors release agrees on.
SUPPORTED_BITS = (1, 2, 4, 8)


def codes_per_word(bits: int) -> int:
    """Codes one int32 word holds."""
    return 32 // bits


def packed_width(count: int, bits: int) -> int:
    """Words a row of ``count`` codes takes (``ceil(count * bits / 32)``)."""
    return -(-count * bits // 32)


def offset_of(bits: int) -> int:
    """What compressed-tensors adds to a signed code before packing it (``2^(bits-1)``)."""
    return 1 << (bits - 1)


def pack_rows(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned codes ``[R, C]`` (each < 2^bits) into int32 words ``[R, ceil(C*bits/32)]``
    along dim 1, LSB first.

    :raises ValueError: on a width that does not divide 32 or a code out of range.
    """
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ValueError(f"codes must be 2-D, got shape {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() >= 1 << bits):
        raise ValueError(f"codes must lie in 0..{(1 << bits) - 1}")
    rows, cols = codes.shape
    k = codes_per_word(bits)
    width = packed_width(cols, bits)
    padded = np.zeros((rows, width * k), dtype=np.uint32)
    padded[:, :cols] = codes
    slots = padded.reshape(rows, width, k)
    words = np.zeros((rows, width), dtype=np.uint32)
    for s in range(k):
        words |= slots[:, :, s] << np.uint32(bits * s)
    return words.view(np.int32)


def pack_cols(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned codes ``[R, C]`` along dim 0: words ``[ceil(R*bits/32), C]``."""
    return np.ascontiguousarray(pack_rows(np.asarray(codes).T, bits).T)


def byte_table(bits: int) -> np.ndarray:
    """Every byte's ``8 / bits`` codes (low bits first) as float32: ``[256, 8 // bits]``.

    A little-endian int32 row read as bytes is the row's bit stream in order,
    so looking its bytes up in this table unpacks the row.
    """
    per = 8 // bits
    b = np.arange(256, dtype=np.uint32)[:, None]
    shifts = (np.arange(per, dtype=np.uint32) * bits)[None, :]
    return ((b >> shifts) & np.uint32((1 << bits) - 1)).astype(np.float32)
