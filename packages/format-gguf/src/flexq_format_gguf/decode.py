"""Vectorised numpy decoders of ggml's block types, exact in float32, band by band.

For the format's apply step and the bench. :func:`decode_rows` hands runs of bands (each
band :data:`BAND_ELEMENTS` values, 1 MiB of float32) to the kit's worker threads
(:func:`flexq.formatkit.run_on_threads`); a decoder turns one run of blocks, a ``uint8``
array ``[n, nbytes]``, into its float32 ``[n, block]`` in place.

numpy pays a fixed cost for every call and for every contiguous run inside a call
(~5 ns: a strided copy of 32-byte rows costs as much per row as per byte of the rest),
so the decoders make few calls over long contiguous runs. A decoder first derives the
run's per-block scales (and mins) as ``[n, k]`` float32, from a structured view of its
block struct (ggml-common.h's ``block_q*``) or uint32 columns read in place, all blocks
of the run at once. Then, band by band: the quants' bit fields of every byte of the band
at once (:func:`flexq_format_gguf.lanes.field_planes`: shifts and masks on uint64 lanes
over the band's raw bytes, scales and all), high bits OR-ed in and offsets taken off as
bytes, ONE copy that converts the bytes to float32 into the output while reading them in
ggml's element order (16-value runs, too short for that, are first put in order as
16-byte items), then the scale multiply and min against the scales repeated to one per
element (a broadcast ``[n, k, 1]`` operand pays a loop per sub-block). IQ4 packs each two
neighbours' nibbles into one index and gathers their two code book values as one 8-byte
item, in element order.

The arithmetic is ggml's own, in its order (a block's scale times its sub-block scale,
rounded to float32, times the exact small-integer quant, then minus the min term: no
fused multiply-add), so every value equals what llama.cpp's reference dequantizer and
gguf-py's ``gguf.quants.dequantize`` give, bit for bit, NaN and infinite scales
included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from flexq.formatkit import (
    RUNS_PER_TASK,
    banded_output,
    fill_band,
    nibble_pairs,
    pair_items,
    run_on_threads,
)
from flexq_format_gguf.ggml import BY_NAME
from flexq_format_gguf.lanes import CRUMBS, NIBBLES, Field, field_planes, or_into, rows, scratch

#: Decode of one run of blocks: (blocks ``[n, nbytes]`` uint8, C-contiguous; out
#: ``[n, block]``, C-contiguous: float32 filled in place, or uint16, a bfloat16 target's
#: bits, each band rounded into it while in cache).
Decoder = Callable[[np.ndarray, np.ndarray], None]
#: Per-block arrays of a run (scales, mins; leading dim the blocks), from its struct view.
Sides = Callable[[np.ndarray], tuple[np.ndarray, ...]]
#: One band's element passes: (blocks, out, that band's rows of each side array).
Band = Callable[..., None]
_F32 = np.float32
_U8 = np.uint8
_I8 = np.int8
_W = np.uint64
#: float32 elements one band decodes: 1 MiB of output, about a core's L2 cache. Bands of
#: 64 Ki values kept every pass in L2 but paid numpy's per-call cost four times as often:
#: 10-30% more CPU time per type (2048 x 4096, one thread); 512 Ki values gained <2% and
#: leave one band per thread of a 4 MiB chunk.
BAND_ELEMENTS = 1 << 18
#: IQ4_NL / IQ4_XS: the non-linear 4-bit code book (ggml's kvalues_iq4nl).
IQ4_VALUES = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32
)
#: IQ4_NL / IQ4_XS's code book over byte pairs: byte -> the values of its (low, high)
#: nibble side by side, one uint64 item (a gather copies both).
_IQ4_PAIRS = pair_items(nibble_pairs(IQ4_VALUES))
#: 0x01 in every byte of a uint64 lane (times a byte: that byte in every byte).
_EVERY_BYTE = 0x0101010101010101
#: Bits 0-3 and 4-7 of every uint16 lane of a uint64.
_LANE_LOW = _W(0x000F000F000F000F)
_LANE_HIGH = _W(0x00F000F000F000F0)
#: Q3_K's mask bit j of every byte as 4 (its place in the 3-bit quant).
_BITS_AT_2: tuple[Field, ...] = tuple((j - 2, 0x04) for j in range(8))
#: Q5_K's fifth bit j of every byte as 16.
_BITS_AT_4: tuple[Field, ...] = tuple((j - 4, 0x10) for j in range(8))
#: Q6_K's 2-bit field k of every byte as bits 4-5.
_CRUMBS_AT_4: tuple[Field, ...] = tuple((2 * k - 4, 0x30) for k in range(4))


def _fields(*fields: tuple[str, str, tuple[int, ...]]) -> np.dtype[np.void]:
    return np.dtype([(name, kind, shape) for name, kind, shape in fields])


#: ggml's block structs as numpy dtypes (float16 fields little-endian, no padding).
STRUCTS: dict[str, np.dtype[np.void]] = {
    "Q8_0": _fields(("d", "<f2", ()), ("qs", "i1", (32,))),
    "Q4_0": _fields(("d", "<f2", ()), ("qs", "u1", (16,))),
    "Q4_1": _fields(("d", "<f2", ()), ("m", "<f2", ()), ("qs", "u1", (16,))),
    "Q5_0": _fields(("d", "<f2", ()), ("qh", "u1", (4,)), ("qs", "u1", (16,))),
    "Q5_1": _fields(("d", "<f2", ()), ("m", "<f2", ()), ("qh", "u1", (4,)), ("qs", "u1", (16,))),
    "Q2_K": _fields(
        ("scales", "u1", (16,)), ("qs", "u1", (64,)), ("d", "<f2", ()), ("dmin", "<f2", ())
    ),
    "Q3_K": _fields(
        ("hmask", "u1", (32,)), ("qs", "u1", (64,)), ("scales", "u1", (12,)), ("d", "<f2", ())
    ),
    "Q4_K": _fields(
        ("d", "<f2", ()), ("dmin", "<f2", ()), ("scales", "u1", (12,)), ("qs", "u1", (128,))
    ),
    "Q5_K": _fields(
        ("d", "<f2", ()),
        ("dmin", "<f2", ()),
        ("scales", "u1", (12,)),
        ("qh", "u1", (32,)),
        ("qs", "u1", (128,)),
    ),
    "Q6_K": _fields(
        ("ql", "u1", (128,)), ("qh", "u1", (64,)), ("scales", "i1", (16,)), ("d", "<f2", ())
    ),
    "IQ4_NL": _fields(("d", "<f2", ()), ("qs", "u1", (16,))),
    "IQ4_XS": _fields(
        ("d", "<f2", ()), ("scales_h", "<u2", ()), ("scales_l", "u1", (4,)), ("qs", "u1", (128,))
    ),
}


def _struct(name: str, blocks: np.ndarray) -> np.ndarray:
    """``[n, nbytes]`` bytes as ``n`` records of block type ``name``."""
    out: np.ndarray = blocks.view(STRUCTS[name]).reshape(blocks.shape[0])
    return out


def _f32(half: np.ndarray) -> np.ndarray:
    """A float16 field of every block as float32 ``[n]``."""
    out: np.ndarray = half.astype(_F32)
    return out


def _banded(name: str, sides: Sides, band: Band, doc: str) -> Decoder:
    """The decoder of block type ``name``: ``sides`` of the whole run at once, then
    ``band`` on each band of :data:`BAND_ELEMENTS` values with its rows of them."""
    block = BY_NAME[name].block

    def decode(blocks: np.ndarray, out: np.ndarray) -> None:
        side = sides(_struct(name, blocks))
        step = max(1, BAND_ELEMENTS // block)
        for a in range(0, blocks.shape[0], step):
            run = slice(a, a + step)
            fill_band(partial(_into, band, blocks[run], [x[run] for x in side]), out[run])

    decode.__name__ = decode.__qualname__ = name.lower()
    decode.__doc__ = doc
    return decode


def _into(band: Band, blocks: np.ndarray, parts: list[np.ndarray], values: np.ndarray) -> None:
    """``band`` of ``blocks`` into ``values`` (for :func:`fill_band`)."""
    band(blocks, values, *parts)


def _field_bits(blocks: np.ndarray, at: int, size: int, fields: Sequence[Field]) -> np.ndarray:
    """The ``fields`` of the ``size`` bytes at ``at`` of every block, ``[len(fields), n,
    size]`` (copied out first: the other bytes' fields would cost more than the copy)."""
    return field_planes(rows(blocks[:, at : at + size]), fields, "bits")


def _spread(side: np.ndarray, per: int) -> np.ndarray:
    """A band's per-block or per-sub-block values (``[n, k]``, C-contiguous), each ``per``
    times: one value per element, flat. An ufunc against the broadcast ``[n, k, 1]``
    pays a loop per sub-block (~3x a full-length one); the repeat costs less than that."""
    return np.repeat(side.reshape(-1), per)


def _less(planes: np.ndarray, minus: int) -> np.ndarray:
    """``planes - minus`` in place as bytes, read back as int8 (every field of a quant
    is below 128 + ``minus``; the other bytes are never read)."""
    np.subtract(planes, _U8(minus), out=planes)
    return planes.view(_I8)


def _d(b: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every block's ``d``, float32 ``[n, 1]``."""
    return (_f32(b["d"])[:, None],)


def _d_m(b: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every block's ``d`` and ``m``, float32 ``[n, 1]`` each."""
    return _f32(b["d"])[:, None], _f32(b["m"])[:, None]


def _q8_0_band(blocks: np.ndarray, out: np.ndarray, d: np.ndarray) -> None:
    np.copyto(out, blocks[:, 2:].view(_I8))
    o = out.reshape(-1)
    o *= _spread(d, 32)


q8_0 = _banded("Q8_0", _d, _q8_0_band, "Q8_0: f16 d, 32 int8; x = q * d.")


def _legacy_band(qh_at: int, qs_at: int, minus: int) -> Band:
    """The band of Q4_0 / Q5_0 (x = (q - minus) * d) or, with ``minus`` 0, of Q4_1 /
    Q5_1 (a min ``m`` too: x = q * d + m): in each block, the 16 low nibbles of the
    bytes at ``qs_at`` are elements 0-15, the high ones 16-31, and (``qh_at``, Q5) bit j
    of the little-endian 32-bit word there is element j's fifth bit."""

    def band(blocks: np.ndarray, out: np.ndarray, d: np.ndarray, *m: np.ndarray) -> None:
        n = blocks.shape[0]
        planes = field_planes(blocks, NIBBLES)
        # Element order as 16-byte items, one strided loop per plane (a copy of 16-byte
        # rows pays a loop per row, ~2x), then every pass on contiguous bytes.
        codes = scratch("codes", 4 * n).view(_U8).reshape(n, 2, 16)
        items = codes.view("V16")[..., 0]
        for half, plane in enumerate(planes[:, :, qs_at : qs_at + 16].view("V16")[..., 0]):
            items[:, half] = plane
        lanes = codes.reshape(-1).view(_W)
        if qh_at:
            lanes |= _sixteens(blocks[:, qh_at : qh_at + 4])
        np.copyto(out.reshape(n, 2, 16), _less(codes, minus) if minus else codes)
        o = out.reshape(-1)
        o *= _spread(d, 32)
        if m:
            o += _spread(m[0], 32)

    return band


def _sixteens(packed: np.ndarray) -> np.ndarray:
    """Bit t of byte c of ``packed`` (``[n, k]`` bytes) as 16 (0 when clear) in byte
    ``8 c + t``: uint64 lanes ``[n * k]`` (each byte times 0x0101..01 puts a copy in every
    byte of its lane; byte t keeps bit t; adding 0x7F carries a set bit to bit 7, without
    crossing into the next byte)."""
    lanes = rows(packed).astype(_W).reshape(-1)
    lanes *= _W(_EVERY_BYTE)
    lanes &= _W(0x8040201008040201)
    lanes += _W(_EVERY_BYTE * 0x7F)
    lanes &= _W(_EVERY_BYTE * 0x80)
    lanes >>= _W(3)
    return lanes


q4_0 = _banded(
    "Q4_0", _d, _legacy_band(0, 2, 8), "Q4_0: f16 d, 16 bytes of nibbles; x = (q - 8) * d."
)
q4_1 = _banded(
    "Q4_1", _d_m, _legacy_band(0, 4, 0), "Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = q * d + m."
)
q5_0 = _banded(
    "Q5_0",
    _d,
    _legacy_band(2, 6, 16),
    "Q5_0: f16 d, 32 high bits, 16 bytes of nibbles; x = (q - 16) * d.",
)
q5_1 = _banded(
    "Q5_1",
    _d_m,
    _legacy_band(4, 8, 0),
    "Q5_1: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; x = q * d + m.",
)


def _q2_k_sides(b: np.ndarray) -> tuple[np.ndarray, ...]:
    """Q2_K's sub-block scales and mins, float32 ``[n, 16]`` each."""
    scales = b["scales"]
    dl = _scaled((scales & _U8(0x0F)).astype(_F32), b["d"])
    ml = _scaled((scales >> _U8(4)).astype(_F32), b["dmin"])
    return dl, ml


def _q2_k_band(blocks: np.ndarray, out: np.ndarray, dl: np.ndarray, ml: np.ndarray) -> None:
    n = blocks.shape[0]
    crumbs = field_planes(blocks, CRUMBS)[:, :, 16:80].reshape(4, n, 2, 32)
    np.copyto(out.reshape(n, 2, 4, 32), crumbs.transpose(1, 2, 0, 3))
    o = out.reshape(-1)
    o *= _spread(dl, 16)
    o -= _spread(ml, 16)


q2_k = _banded(
    "Q2_K",
    _q2_k_sides,
    _q2_k_band,
    """Q2_K: 16 scale bytes (4-bit scale, 4-bit min), 64 bytes of 2-bit quants, f16 d, dmin;
    x = (d * scale) * q - (dmin * min) per sixteen elements (field k of byte ``32 h + l``
    is element ``128 h + 32 k + l``).""",
)


def _q3_k_sides(b: np.ndarray) -> tuple[np.ndarray, ...]:
    """Q3_K's sub-block scales, float32 ``[n, 16]``."""
    return (_scaled(_q3_scales(rows(b["scales"]).view("<u4")), b["d"]),)


def _q3_k_band(blocks: np.ndarray, out: np.ndarray, dl: np.ndarray) -> None:
    n = blocks.shape[0]
    planes = field_planes(blocks, CRUMBS)
    bits = _field_bits(blocks, 0, 32, _BITS_AT_2).reshape(2, 4, n, 32)
    # q + 4 * bit (less 4 below): bit 4 h + k of byte l to crumb k of byte 32 + 32 h + l
    or_into(planes, lambda p: p[:, :, 32:96].reshape(4, n, 2, 32), bits.transpose(1, 2, 0, 3))
    codes = _less(planes, 4)[:, :, 32:96].reshape(4, n, 2, 32)
    np.copyto(out.reshape(n, 2, 4, 32), codes.transpose(1, 2, 0, 3))
    o = out.reshape(-1)
    o *= _spread(dl, 16)


q3_k = _banded(
    "Q3_K",
    _q3_k_sides,
    _q3_k_band,
    """Q3_K: 32 bytes of high-bit mask, 64 of 2-bit quants, 12 of 6-bit scales, f16 d;
    x = (d * (scale - 32)) * (q - 4 * (mask bit clear)) per sixteen elements: bit
    ``4 h + k`` of mask byte l belongs to element ``128 h + 32 k + l``.""",
)


def _q3_scales(words: np.ndarray) -> np.ndarray:
    """Q3_K's sixteen 6-bit scales less 32, float32 ``[n, 16]``, from its 12 bytes as
    three little-endian words ``[n, 3]`` (low0, low1, high): scale j's low four bits are
    nibble ``j // 8`` of byte ``j % 8``, its high two bits field ``j // 4`` of byte
    ``8 + j % 4``; four scales at once per word."""
    low0, low1, high = words[:, 0], words[:, 1], words[:, 2]
    every = np.uint32(0x01010101)
    nibble, top = every * 0x0F, every * 0x30
    out = np.empty((words.shape[0], 4), np.uint32)  # scales 0-3, 4-7, 8-11, 12-15
    np.bitwise_or(low0 & nibble, (high << 4) & top, out=out[:, 0])
    np.bitwise_or(low1 & nibble, (high << 2) & top, out=out[:, 1])
    np.bitwise_or((low0 >> 4) & nibble, high & top, out=out[:, 2])
    np.bitwise_or((low1 >> 4) & nibble, (high >> 2) & top, out=out[:, 3])
    scales = out.view(_U8).astype(_F32)
    scales -= _F32(32)
    return scales


def _k_scale_min(words: np.ndarray) -> np.ndarray:
    """The eight 6-bit scales and the eight mins of Q4_K/Q5_K's 12 bytes, float32
    ``[2, n, 8]``, from those bytes as three little-endian words ``[n, 3]`` (d, m, md;
    read in place): each rule done on a word's four bytes at once, over the whole run
    (the per-byte slices cost a loop per block)."""
    d, m, md = (np.ascontiguousarray(words[:, i]) for i in range(3))  # read once each
    every = np.uint32(0x01010101)
    both = np.empty((2, words.shape[0], 2), np.uint32)  # (scales, mins) of 0-3, 4-7
    np.bitwise_and(d, every * 0x3F, out=both[0, :, 0])
    np.bitwise_or(md & (every * 0x0F), (d >> 2) & (every * 0x30), out=both[0, :, 1])
    np.bitwise_and(m, every * 0x3F, out=both[1, :, 0])
    np.bitwise_or((md >> 4) & (every * 0x0F), (m >> 2) & (every * 0x30), out=both[1, :, 1])
    values: np.ndarray = both.view(_U8).astype(_F32)
    return values


def _scaled(values: np.ndarray, half: np.ndarray) -> np.ndarray:
    """``values`` (``[n, k]`` float32, C-contiguous) times each block's float16 ``half``
    (``[n]``), in place: every block's float32 scale repeated k times, then one
    full-length multiply (a broadcast ``[n, 1]`` pays a loop per block)."""
    flat = values.reshape(-1)
    flat *= np.repeat(_f32(half), values.shape[1])
    return values


def _k_sides(b: np.ndarray) -> tuple[np.ndarray, ...]:
    """Q4_K/Q5_K's sub-block scales and mins, float32 ``[n, 8]`` each."""
    # d, dmin and the 12 scale bytes are the block's first 16 bytes: words 1-3 the scales.
    words = b.view("<u4").reshape(b.shape[0], -1)[:, 1:4]
    both = _k_scale_min(words)
    return _scaled(both[0], b["d"]), _scaled(both[1], b["dmin"])


def _k_band(qs_at: int, qh_at: int) -> Band:
    """The band of Q4_K or (``qh_at``) Q5_K: x = (d * scale) * q - (dmin * min) per 32
    elements; the low nibbles of bytes ``qs_at + 32 i ..`` are sub-block 2 i, the high
    ones 2 i + 1, and bit j of byte ``qh_at + l`` is the fifth bit of element ``32 j + l``."""

    def band(blocks: np.ndarray, out: np.ndarray, dl: np.ndarray, ml: np.ndarray) -> None:
        n = blocks.shape[0]
        planes = field_planes(blocks, NIBBLES)
        if qh_at:
            bits = _field_bits(blocks, qh_at, 32, _BITS_AT_4)
            fifth = bits.reshape(4, 2, n, 32).transpose(1, 2, 0, 3)
            or_into(planes, lambda p: p[:, :, qs_at:].reshape(2, n, 4, 32), fifth)
        codes = planes[:, :, qs_at:].reshape(2, n, 4, 32)
        np.copyto(out.reshape(n, 4, 2, 32), codes.transpose(1, 2, 0, 3))
        o = out.reshape(-1)
        o *= _spread(dl, 32)
        o -= _spread(ml, 32)

    return band


q4_k = _banded(
    "Q4_K",
    _k_sides,
    _k_band(16, 0),
    "Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles.",
)
q5_k = _banded(
    "Q5_K",
    _k_sides,
    _k_band(48, 16),
    "Q5_K: as Q4_K plus 32 bytes of fifth bits before the nibbles.",
)


def _q6_k_sides(b: np.ndarray) -> tuple[np.ndarray, ...]:
    """Q6_K's sub-block scales, float32 ``[n, 16]``."""
    return (_scaled(b["scales"].astype(_F32), b["d"]),)


def _q6_k_band(blocks: np.ndarray, out: np.ndarray, dl: np.ndarray) -> None:
    n = blocks.shape[0]
    planes = field_planes(blocks, NIBBLES)
    high = _field_bits(blocks, 128, 64, _CRUMBS_AT_4)
    # Low bytes as (nibble, block, half, 32-byte row, l); field 2 nibble + row of qh.
    top = high.reshape(2, 2, n, 2, 32).transpose(0, 2, 3, 1, 4)
    or_into(planes, lambda p: p[:, :, :128].reshape(2, n, 2, 2, 32), top)
    codes = _less(planes, 32)[:, :, :128].reshape(2, n, 2, 2, 32)
    np.copyto(out.reshape(n, 2, 2, 2, 32), codes.transpose(1, 2, 0, 3, 4))
    o = out.reshape(-1)
    o *= _spread(dl, 16)


q6_k = _banded(
    "Q6_K",
    _q6_k_sides,
    _q6_k_band,
    """Q6_K: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d;
    x = (d * scale) * (q - 32) per sixteen elements. Element ``128 h + 32 k + l`` has
    nibble ``k // 2`` of byte ``64 h + 32 (k % 2) + l`` and, as its two high bits, field
    k of ``qh[32 h + l]``.""",
)


def _book(qs: np.ndarray, out: np.ndarray) -> None:
    """``out = IQ4_VALUES[q]`` of IQ4's nibbles ``qs`` (``[n, m]`` bytes; in each 16, the
    low nibbles are 16 elements, then the high ones), two values per 8-byte gather: each
    pair of neighbouring elements' nibbles is first packed into one index (the low byte
    of a uint16 lane: bytes 2k, 2k + 1) over the whole band, so the gather writes element
    order (~4x faster than a gather per value). A 16-byte group's 8 low-nibble pairs and
    8 high-nibble pairs are 16 bytes of indices each, interleaved as 16-byte items."""
    lanes = rows(qs).view(_W).reshape(-1)
    first = np.bitwise_or(lanes & _LANE_LOW, (lanes >> _W(4)) & _LANE_HIGH)  # low nibbles
    second = np.bitwise_or((lanes >> _W(4)) & _LANE_LOW, (lanes >> _W(8)) & _LANE_HIGH)
    index = np.stack([first.view("V16"), second.view("V16")], axis=1).view(np.uint16)
    np.take(_IQ4_PAIRS, index.reshape(-1), out=out.reshape(-1).view(_W), mode="clip")


def _book_band(qs_at: int) -> Band:
    """The band of IQ4_NL / IQ4_XS: the code book looked up by the nibbles from byte
    ``qs_at`` of each block (:func:`_book`), times one scale per 32 elements."""

    def band(blocks: np.ndarray, out: np.ndarray, scale: np.ndarray) -> None:
        _book(blocks[:, qs_at:], out)
        o = out.reshape(-1)
        o *= _spread(scale, 32)

    return band


iq4_nl = _banded(
    "IQ4_NL",
    _d,
    _book_band(2),
    "IQ4_NL: f16 d, 16 bytes of nibbles indexing the code book; x = d * book[q].",
)


def _iq4_xs_sides(b: np.ndarray) -> tuple[np.ndarray, ...]:
    """IQ4_XS's sub-block scales, float32 ``[n, 8]``: scale j's low four bits are
    nibble ``j % 2`` of ``scales_l[j // 2]``, its high two bits field j of ``scales_h``."""
    n = b.shape[0]
    shifts = 2 * np.arange(8, dtype=np.uint16)
    high = ((b["scales_h"].reshape(n, 1) >> shifts) & np.uint16(3)).astype(_U8)
    packed = b["scales_l"]
    low = np.stack([packed & _U8(0x0F), packed >> _U8(4)], axis=2).reshape(n, 8)
    high <<= _U8(4)
    high |= low
    dl = high.astype(_F32)
    dl -= _F32(32)
    return (_scaled(dl, b["d"]),)


iq4_xs = _banded(
    "IQ4_XS",
    _iq4_xs_sides,
    _book_band(8),
    """IQ4_XS: f16 d, 2 bytes of scale high bits, 4 of scale low nibbles, 128 of nibbles;
    x = (d * (scale - 32)) * book[q] per 32 elements (low nibbles of bytes ``16 j ..``
    first).""",
)


DECODERS: dict[str, Decoder] = {
    "Q8_0": q8_0, "Q4_0": q4_0, "Q4_1": q4_1, "Q5_0": q5_0, "Q5_1": q5_1,
    "Q2_K": q2_k, "Q3_K": q3_k, "Q4_K": q4_k, "Q5_K": q5_k, "Q6_K": q6_k,
    "IQ4_NL": iq4_nl, "IQ4_XS": iq4_xs,
}  # fmt: skip


def decode_rows(
    type_name: str,
    raw: np.ndarray,
    out: np.ndarray | None = None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """Dequantize ``raw`` (``[..., blocks * nbytes]`` uint8, whole blocks per row) of
    block type ``type_name`` to float32 ``[..., blocks * block]``, into ``out`` when given
    (C-contiguous float32 of that shape; a new array otherwise), in L2-sized bands on the
    worker threads. With ``rounded`` (C-contiguous uint16 of that shape: a bfloat16
    target's memory, ``BoxSources.rounded_out``) the bfloat16 bits go there instead, each
    band rounded while in cache, and ``rounded`` is returned. Products beyond float32's
    range are inf, without a warning, as ggml's are."""
    t = BY_NAME[type_name]
    blocks = np.ascontiguousarray(raw).reshape(-1, t.nbytes)
    shape = (*raw.shape[:-1], raw.shape[-1] // t.nbytes * t.block)
    for given, dtype in ((out, _F32), (rounded, np.uint16)):
        if given is not None and (
            given.shape != shape or given.dtype != dtype or not given.flags.c_contiguous
        ):
            raise ValueError(
                f"decode_rows({type_name!r}): out= / rounded= must be C-contiguous "
                f"{np.dtype(dtype)} {shape}, not {given.dtype} {given.shape}"
            )
    result = banded_output(shape, out, rounded)
    values = result.reshape(-1, t.block)  # a view: C-contiguous
    decoder = DECODERS[type_name]
    step = max(1, BAND_ELEMENTS // t.block)

    def work(starts: Sequence[int]) -> None:
        # One call per run: the decoder derives the run's scales once, then bands it.
        a, z = starts[0], starts[-1] + step
        with np.errstate(over="ignore", invalid="ignore"):
            decoder(blocks[a:z], values[a:z])

    run_on_threads(work, range(0, blocks.shape[0], step), RUNS_PER_TASK)
    return result
