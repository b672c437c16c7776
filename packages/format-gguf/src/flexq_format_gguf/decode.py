"""Vectorised numpy decoders of ggml's block types, exact in float32.

For the format's apply step and the bench. Each decoder takes the blocks of a box as
a ``uint8`` array ``[n, nbytes]`` and returns float32 ``[n, block]``. The arithmetic
is ggml's own, in its order (a block's scale times its sub-block scale, rounded to
float32, times the quant, then minus the min term), so every value equals what
llama.cpp's reference dequantizer and gguf-py's ``gguf.quants.dequantize`` give,
bit for bit. Layouts are ggml's ``block_q*`` structs (ggml-common.h).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flexq_format_gguf.ggml import BY_NAME, QK_K

Decoder = Callable[[np.ndarray], np.ndarray]
_F32 = np.float32
#: Shifts that split a byte into its two nibbles, four 2-bit fields, eight bits.
_NIBBLES = np.array([0, 4], np.uint8)
_CRUMBS = np.array([0, 2, 4, 6], np.uint8)
_BITS = np.arange(8, dtype=np.uint8)
#: IQ4_NL / IQ4_XS: the non-linear 4-bit code book (ggml's kvalues_iq4nl).
IQ4_VALUES = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32
)


def _half(blocks: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte ``at`` of every block, as float32 ``[n, 1]``."""
    return blocks[:, at : at + 2].copy().view(np.float16).astype(_F32)


def _low_high(packed: np.ndarray, group: int) -> np.ndarray:
    """Nibbles of ``[n, m]`` bytes in ggml's order: within each ``group`` bytes, every
    low nibble, then every high one (``[n, 2 m]``). Each half is written straight into
    its place (no broadcast temporaries: this runs in every decoder), from a contiguous
    copy of the bytes (a block's slice is strided; the copy is a fraction of the work and
    makes both halves several times faster)."""
    n = packed.shape[0]
    grouped = np.ascontiguousarray(packed).reshape(n, -1, group)
    out = np.empty((n, grouped.shape[1], 2, group), np.uint8)
    np.bitwise_and(grouped, 0x0F, out=out[:, :, 0])
    np.right_shift(grouped, 4, out=out[:, :, 1])
    return out.reshape(n, -1)


def _plane_bits(packed: np.ndarray, shifts: np.ndarray, mask: int) -> np.ndarray:
    """Fields of ``[n, m]`` bytes taken plane by plane: field k of every byte of a
    32-byte group, k = 0.. (``[n, m * len(shifts)]``), as ggml's K-quants lay them; each
    plane written into its place from a contiguous copy, as :func:`_low_high` does."""
    n = packed.shape[0]
    grouped = np.ascontiguousarray(packed).reshape(n, -1, 32)
    out = np.empty((n, grouped.shape[1], len(shifts), 32), np.uint8)
    for k, shift in enumerate(shifts.tolist()):
        np.right_shift(grouped, shift, out=out[:, :, k])
    out &= mask
    return out.reshape(n, -1)


def _high_bit_32(blocks: np.ndarray, at: int) -> np.ndarray:
    """The 32 high bits (one per element) of a Q5_0/Q5_1 block, as ``[n, 32]`` uint8:
    bit j of the little-endian word at ``at`` is element j's."""
    out: np.ndarray = np.unpackbits(blocks[:, at : at + 4], axis=1, bitorder="little")
    return out


def q8_0(blocks: np.ndarray) -> np.ndarray:
    """Q8_0: f16 d, 32 int8; x = q * d."""
    out: np.ndarray = blocks[:, 2:].view(np.int8).astype(_F32)
    out *= _half(blocks, 0)
    return out


def q4_0(blocks: np.ndarray) -> np.ndarray:
    """Q4_0: f16 d, 16 bytes of nibbles; x = (q - 8) * d."""
    # In place on one float32 array (q - 8 is exact in float32): no integer temporaries.
    out: np.ndarray = _low_high(blocks[:, 2:], 16).astype(_F32)
    out -= 8
    out *= _half(blocks, 0)
    return out


def q4_1(blocks: np.ndarray) -> np.ndarray:
    """Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = q * d + m."""
    out: np.ndarray = _low_high(blocks[:, 4:], 16).astype(_F32)
    out *= _half(blocks, 0)
    out += _half(blocks, 2)
    return out


def _five_bits(blocks: np.ndarray, at: int) -> np.ndarray:
    """Q5_0/Q5_1's 5-bit quants ``[n, 32]``: the 32 high bits at ``at``, the nibbles after."""
    q = _low_high(blocks[:, at + 4 :], 16)
    q |= _high_bit_32(blocks, at) << 4
    return q


def q5_0(blocks: np.ndarray) -> np.ndarray:
    """Q5_0: f16 d, 32 high bits, 16 bytes of nibbles; x = (q - 16) * d."""
    out: np.ndarray = _five_bits(blocks, 2).astype(_F32)
    out -= 16
    out *= _half(blocks, 0)
    return out


def q5_1(blocks: np.ndarray) -> np.ndarray:
    """Q5_1: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; x = q * d + m."""
    out: np.ndarray = _five_bits(blocks, 4).astype(_F32)
    out *= _half(blocks, 0)
    out += _half(blocks, 2)
    return out


def q2_k(blocks: np.ndarray) -> np.ndarray:
    """Q2_K: 16 scale bytes (4-bit scale, 4-bit min), 64 bytes of 2-bit quants, f16 d, dmin."""
    n = blocks.shape[0]
    scales = blocks[:, :16]
    d, dmin = _half(blocks, 80), _half(blocks, 82)
    dl = (d * (scales & 0x0F).astype(_F32)).reshape(n, 16, 1)
    ml = (dmin * (scales >> 4).astype(_F32)).reshape(n, 16, 1)
    q = _plane_bits(blocks[:, 16:80], _CRUMBS, 3).reshape(n, 16, 16).astype(_F32)
    q *= dl
    q -= ml
    return q.reshape(n, QK_K)


def q3_k(blocks: np.ndarray) -> np.ndarray:
    """Q3_K: 32 bytes of high-bit mask, 64 of 2-bit quants, 12 of 6-bit scales, f16 d."""
    n = blocks.shape[0]
    low = _low_high(blocks[:, 96:104], 8)  # the scales' low 4 bits, [n, 16]
    high = (blocks[:, 104:108].reshape(n, 1, 4) >> _CRUMBS.reshape(1, 4, 1)).reshape(n, 16) & 3
    scales = ((low | (high << 4)).astype(np.int8) - np.int8(32)).astype(_F32)
    dl = (_half(blocks, 108) * scales).reshape(n, 16, 1)
    ql = _plane_bits(blocks[:, 32:96], _CRUMBS, 3).reshape(n, 16, 16)
    # A clear mask bit subtracts 4 (ggml stores the complement).
    qh = (_plane_bits(blocks[:, :32], _BITS, 1).reshape(n, 16, 16) ^ 1) << 2
    q = ql.astype(_F32)
    q -= qh  # 0 or 4: exact in float32
    q *= dl
    return q.reshape(n, QK_K)


def _k_scale_min(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins of a Q4_K/Q5_K block's 12 bytes, as float32 [n, 8]."""
    n = packed.shape[0]
    d, m, md = (packed[:, i * 4 : i * 4 + 4] for i in range(3))
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc.reshape(n, 8).astype(_F32), mn.reshape(n, 8).astype(_F32)


def q4_k(blocks: np.ndarray) -> np.ndarray:
    """Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles."""
    n = blocks.shape[0]
    sc, mn = _k_scale_min(blocks[:, 4:16])
    d = (_half(blocks, 0) * sc).reshape(n, 8, 1)
    dm = (_half(blocks, 2) * mn).reshape(n, 8, 1)
    q = _low_high(blocks[:, 16:], 32).reshape(n, 8, 32).astype(_F32)
    q *= d
    q -= dm
    return q.reshape(n, QK_K)


def q5_k(blocks: np.ndarray) -> np.ndarray:
    """Q5_K: as Q4_K plus 32 bytes of fifth bits before the nibbles."""
    n = blocks.shape[0]
    sc, mn = _k_scale_min(blocks[:, 4:16])
    d = (_half(blocks, 0) * sc).reshape(n, 8, 1)
    dm = (_half(blocks, 2) * mn).reshape(n, 8, 1)
    ql = _low_high(blocks[:, 48:], 32).reshape(n, 8, 32)
    qh = _plane_bits(blocks[:, 16:48], _BITS, 1).reshape(n, 8, 32)
    ql |= qh << 4
    q = ql.astype(_F32)
    q *= d
    q -= dm
    return q.reshape(n, QK_K)


def q6_k(blocks: np.ndarray) -> np.ndarray:
    """Q6_K: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d."""
    n = blocks.shape[0]
    ql = _low_high(blocks[:, :128], 64).reshape(n, -1, 32)
    qh = _plane_bits(blocks[:, 128:192], _CRUMBS, 3).reshape(n, -1, 32)
    ql |= qh << 4
    out: np.ndarray = ql.reshape(n, 16, 16).astype(_F32)
    out -= 32
    out *= (_half(blocks, 208) * blocks[:, 192:208].view(np.int8).astype(_F32)).reshape(n, 16, 1)
    return out.reshape(n, QK_K)


def iq4_nl(blocks: np.ndarray) -> np.ndarray:
    """IQ4_NL: f16 d, 16 bytes of nibbles indexing the code book; x = d * book[q]."""
    out: np.ndarray = _half(blocks, 0) * IQ4_VALUES[_low_high(blocks[:, 2:], 16)]
    return out


def iq4_xs(blocks: np.ndarray) -> np.ndarray:
    """IQ4_XS: f16 d, 2 bytes of scale high bits, 4 of scale low nibbles, 128 of nibbles."""
    n = blocks.shape[0]
    high = blocks[:, 2:4].copy().view("<u2").astype(np.uint16)
    high = ((high >> (2 * np.arange(8, dtype=np.uint16))) & 3).astype(np.uint8)
    low = _low_high(blocks[:, 4:8].reshape(n, 4, 1), 1).reshape(n, 4, 2).reshape(n, 8)
    scales = ((low | (high << 4)).astype(np.int16) - 32).astype(_F32)
    dl = (_half(blocks, 0) * scales).reshape(n, 8, 1)
    q = IQ4_VALUES[_low_high(blocks[:, 8:], 16)].reshape(n, 8, 32)
    out: np.ndarray = (dl * q).reshape(n, QK_K)
    return out


DECODERS: dict[str, Decoder] = {
    "Q8_0": q8_0, "Q4_0": q4_0, "Q4_1": q4_1, "Q5_0": q5_0, "Q5_1": q5_1,
    "Q2_K": q2_k, "Q3_K": q3_k, "Q4_K": q4_k, "Q5_K": q5_k, "Q6_K": q6_k,
    "IQ4_NL": iq4_nl, "IQ4_XS": iq4_xs,
}  # fmt: skip


def decode_rows(type_name: str, raw: np.ndarray) -> np.ndarray:
    """Dequantize ``raw`` (``[..., blocks * nbytes]`` uint8, whole blocks per row) of
    block type ``type_name`` to float32 ``[..., blocks * block]``."""
    t = BY_NAME[type_name]
    blocks = np.ascontiguousarray(raw).reshape(-1, t.nbytes)
    values = DECODERS[type_name](blocks)
    lead = raw.shape[:-1]
    return values.reshape(*lead, raw.shape[-1] // t.nbytes * t.block)
