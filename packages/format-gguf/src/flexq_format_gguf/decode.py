"""Vectorised numpy decoders of ggml's block types, exact in float32, band by band.

For the format's apply step and the bench. :func:`decode_rows` cuts a box's blocks into
bands whose float32 output fits a core's L2 cache and hands runs of bands to the kit's
worker threads (:func:`flexq.formatkit.run_on_threads`); each decoder turns one band of
blocks, a ``uint8`` array ``[n, nbytes]``, into its float32 ``[n, block]`` in place.

A band is read through a structured view of its block struct (ggml-common.h's
``block_q*``), so ``d`` / ``dmin`` / ``scales`` / ``qs`` are strided fields and no
Python runs per block. Quants are unpacked into a reused per-thread ``uint8`` band in
ggml's element order: shifts and masks run on uint64 lanes (eight bytes at once) over
the whole band, then one interleaving copy puts each plane in its place (numpy's uint8
shifts go a byte at a time, and a strided op costs a loop per 32 bytes); K-quant 6-bit
scales unpack four at a time on 32-bit words. One exact conversion to float32 into the
output follows, then the scale multiply (and min) in place while the band is in cache.
IQ4 packs each two neighbours' nibbles into one index byte and gathers their two code
book values as one 8-byte item, in element order.

The arithmetic is ggml's own, in its order (a block's scale times its sub-block scale,
rounded to float32, times the exact small-integer quant, then minus the min term: no
fused multiply-add), so every value equals what llama.cpp's reference dequantizer and
gguf-py's ``gguf.quants.dequantize`` give, bit for bit, NaN and infinite scales
included.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from flexq.formatkit import RUNS_PER_TASK, nibble_pairs, pair_items, run_on_threads
from flexq_format_gguf.ggml import BY_NAME, QK_K

#: Decode of one band: (blocks ``[n, nbytes]`` uint8, C-contiguous; out ``[n, block]``
#: float32, C-contiguous), filled in place.
Decoder = Callable[[np.ndarray, np.ndarray], None]
_F32 = np.float32
#: float32 elements one band decodes: 256 KiB of output, a quarter of that in codes and
#: the band's blocks, so every pass over a band finds it in a core's 1 MiB L2 cache.
BAND_ELEMENTS = 1 << 16
#: IQ4_NL / IQ4_XS: the non-linear 4-bit code book (ggml's kvalues_iq4nl).
IQ4_VALUES = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32
)
_U8 = np.uint8
#: IQ4_NL / IQ4_XS's code book over byte pairs: byte -> the values of its (low, high)
#: nibble side by side, one uint64 item (a gather copies both).
_IQ4_PAIRS = pair_items(nibble_pairs(IQ4_VALUES))
_W = np.uint64
#: 0x01 in every byte of a uint64 lane (times a byte mask: that mask in every byte).
_EVERY_BYTE = _W(0x0101010101010101)
_LOW_NIBBLES = _EVERY_BYTE * _W(0x0F)
#: Bits 0-3 and 4-7 of every uint16 lane of a uint64.
_LANE_LOW = _W(0x000F000F000F000F)
_LANE_HIGH = _W(0x00F000F000F000F0)
#: Shifts that take a byte's eight bits, or its four 2-bit fields, one plane at a time.
_BIT_SHIFTS = tuple(_W(i) for i in range(8))
_CRUMB_SHIFTS = tuple(_W(i) for i in (0, 2, 4, 6))


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


def _f32(half: np.ndarray, *shape: int) -> np.ndarray:
    """A float16 field of every block as float32, reshaped to ``shape`` (``[n, 1, ...]``)."""
    return half.astype(_F32).reshape(half.shape[0], *shape)


_local = threading.local()


def _codes(n: int, block: int) -> np.ndarray:
    """This thread's reused ``uint8 [n, block]``, a band's quants in element order (new
    arrays of a band's size were mapped afresh by every call: their page faults cost
    several times the work)."""
    buf: np.ndarray | None = getattr(_local, "codes", None)
    if buf is None or buf.size < n * block:
        buf = _local.codes = np.empty(max(n * block, BAND_ELEMENTS), _U8)
    return buf[: n * block].reshape(n, block)


def _lanes(x: np.ndarray) -> np.ndarray:
    """Bytes ``[..., m]`` (m a multiple of 8) as uint64 ``[..., m // 8]``: shifts and
    masks of every byte done 8 bytes at a time (numpy shifts uint8 a byte at a time,
    several times slower); a field's bits never cross into the next byte once masked."""
    return np.ascontiguousarray(x).view(_W)


def _nibbles(qs: np.ndarray, group: int, into: np.ndarray) -> None:
    """The nibbles of ``qs`` (``[n, m]`` bytes) into ``into`` (``[n, 2 m]``) in ggml's
    order: within each ``group`` bytes, every low nibble, then every high one."""
    n = qs.shape[0]
    lanes = _lanes(qs)
    # Both halves over the whole band first (long loops), then one interleaving copy.
    low = lanes & _LOW_NIBBLES
    high = lanes >> _W(4)
    high &= _LOW_NIBBLES
    halves = [x.reshape(n, -1, group // 8) for x in (low, high)]
    np.stack(halves, axis=2, out=into.view(_W).reshape(n, -1, 2, group // 8))


def _planes(packed: np.ndarray, shifts: tuple[np.uint64, ...], mask: int) -> np.ndarray:
    """Fields of ``packed`` (``[n, k, 32]`` bytes) plane by plane: ``[n, k, planes, 32]``
    bytes, field p of byte l at ``[.., p, l]`` (as ggml's K-quants lay their bits)."""
    n, k = packed.shape[:2]
    lanes = _lanes(packed).reshape(n, k, 4)
    every = _EVERY_BYTE * _W(mask)
    planes = []
    for shift in shifts:  # each plane over the whole band (long loops), then one copy
        plane = lanes >> shift
        plane &= every
        planes.append(plane)
    out: np.ndarray = np.stack(planes, axis=2)
    return out.view(_U8).reshape(n, k, len(shifts), 32)


def _shift_left(x: np.ndarray, bits: int) -> None:
    """``x <<= bits`` for contiguous bytes whose values stay below 256 (8 at a time)."""
    lanes = x.view(_W)
    lanes <<= _W(bits)


def _to_float(codes: np.ndarray, out: np.ndarray, minus: int = 0) -> None:
    """``out = codes - minus`` in float32: the small integers are exact; ``minus`` is
    taken in uint8 and read back as int8 (the codes are below 128 + ``minus``)."""
    if minus:
        codes -= _U8(minus)
        codes = codes.view(np.int8)
    np.copyto(out, codes.reshape(out.shape))


def q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q8_0: f16 d, 32 int8; x = q * d."""
    b = _struct("Q8_0", blocks)
    np.copyto(out, b["qs"])
    out *= _f32(b["d"], 1)


def _q4_codes(b: np.ndarray) -> np.ndarray:
    """Q4_0/Q4_1's 32 nibbles per block in element order (low nibbles first)."""
    codes = _codes(b.shape[0], 32)
    _nibbles(b["qs"], 16, codes)
    return codes


def _q5_codes(b: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1's 5-bit quants: the nibbles, and bit j of the little-endian 32-bit
    ``qh`` as element j's fifth bit."""
    codes = _q4_codes(b)
    high = np.unpackbits(b["qh"], axis=1, bitorder="little")
    _shift_left(high, 4)
    codes |= high
    return codes


def _legacy(name: str, codes: Callable[[np.ndarray], np.ndarray], minus: int, doc: str) -> Decoder:
    """The decoder of Q4_0 / Q5_0 (x = (q - minus) * d) or, with ``minus`` 0, of Q4_1 /
    Q5_1 (a min ``m`` too: x = q * d + m), from their ``codes`` in element order."""

    def decode(blocks: np.ndarray, out: np.ndarray) -> None:
        b = _struct(name, blocks)
        _to_float(codes(b), out, minus)
        out *= _f32(b["d"], 1)
        if not minus:
            out += _f32(b["m"], 1)

    decode.__name__ = decode.__qualname__ = name.lower()
    decode.__doc__ = doc
    return decode


q4_0 = _legacy("Q4_0", _q4_codes, 8, "Q4_0: f16 d, 16 bytes of nibbles; x = (q - 8) * d.")
q4_1 = _legacy("Q4_1", _q4_codes, 0, "Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = q * d + m.")
q5_0 = _legacy(
    "Q5_0", _q5_codes, 16, "Q5_0: f16 d, 32 high bits, 16 bytes of nibbles; x = (q - 16) * d."
)
q5_1 = _legacy(
    "Q5_1", _q5_codes, 0, "Q5_1: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; x = q * d + m."
)


def _by_sixteen(out: np.ndarray) -> np.ndarray:
    """``out`` ``[n, 256]`` viewed as its sixteen sub-blocks of sixteen."""
    return out.reshape(out.shape[0], 16, 16)


def q2_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q2_K: 16 scale bytes (4-bit scale, 4-bit min), 64 bytes of 2-bit quants, f16 d, dmin;
    x = (d * scale) * q - (dmin * min) per sixteen elements (field k of byte ``32 h + l``
    is element ``128 h + 32 k + l``)."""
    b = _struct("Q2_K", blocks)
    n = b.shape[0]
    scales = b["scales"]
    dl = _f32(b["d"], 1) * (scales & 0x0F).astype(_F32)
    ml = _f32(b["dmin"], 1) * (scales >> 4).astype(_F32)
    _to_float(_planes(b["qs"].reshape(n, 2, 32), _CRUMB_SHIFTS, 3), out)
    o = _by_sixteen(out)
    o *= dl.reshape(n, 16, 1)
    o -= ml.reshape(n, 16, 1)


def q3_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q3_K: 32 bytes of high-bit mask, 64 of 2-bit quants, 12 of 6-bit scales, f16 d;
    x = (d * (scale - 32)) * (q - 4 * (mask bit clear)) per sixteen elements: bit
    ``4 h + k`` of mask byte l belongs to element ``128 h + 32 k + l``."""
    b = _struct("Q3_K", blocks)
    n = b.shape[0]
    scales = _q3_scales(b["scales"])
    codes = _planes(b["qs"].reshape(n, 2, 32), _CRUMB_SHIFTS, 3)
    mask = _planes(b["hmask"].reshape(n, 1, 32), _BIT_SHIFTS, 1)
    _shift_left(mask, 2)
    codes |= mask.reshape(codes.shape)  # q + 4 * bit; less 4 below
    _to_float(codes, out, 4)
    _by_sixteen(out)[...] *= (_f32(b["d"], 1) * scales).reshape(n, 16, 1)


def _q3_scales(packed: np.ndarray) -> np.ndarray:
    """Q3_K's sixteen 6-bit scales less 32, float32 ``[n, 16]``: scale j's low four bits
    are nibble ``j // 8`` of byte ``j % 8``, its high two bits field ``j // 4`` of byte
    ``8 + j % 4``; four scales at once per little-endian word (low0, low1, high)."""
    n = packed.shape[0]
    low0, low1, high = _words(packed, 3)
    every = np.uint32(0x01010101)
    nibble, top = every * 0x0F, every * 0x30
    words = np.empty((4, n), np.uint32)  # scales 0-3, 4-7, 8-11, 12-15
    np.bitwise_or(low0 & nibble, (high << 4) & top, out=words[0])
    np.bitwise_or(low1 & nibble, (high << 2) & top, out=words[1])
    np.bitwise_or((low0 >> 4) & nibble, high & top, out=words[2])
    np.bitwise_or((low1 >> 4) & nibble, (high >> 2) & top, out=words[3])
    scales: np.ndarray = words.T.copy().view(_U8).astype(_F32)
    scales -= _F32(32)
    return scales


def _k_scale_min(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins of Q4_K/Q5_K's 12 bytes, float32 ``[n, 8]`` each:
    the bytes as three little-endian words (d, m, md), each rule done on a word's four
    bytes at once, over the whole band (the per-byte slices cost a loop per block)."""
    n = packed.shape[0]
    d, m, md = _words(packed, 3)
    every = np.uint32(0x01010101)
    both = np.empty((2, 2, n), np.uint32)  # (scale or min, first or last four)
    np.bitwise_and(d, every * 0x3F, out=both[0, 0])
    np.bitwise_and(m, every * 0x3F, out=both[1, 0])
    np.bitwise_or(md & (every * 0x0F), (d >> 2) & (every * 0x30), out=both[0, 1])
    np.bitwise_or((md >> 4) & (every * 0x0F), (m >> 2) & (every * 0x30), out=both[1, 1])
    values = both.transpose(0, 2, 1).copy().view(_U8).astype(_F32)  # [2, n, 8]
    return values[0], values[1]


def _words(packed: np.ndarray, count: int) -> list[np.ndarray]:
    """``[n, 4 count]`` bytes as ``count`` arrays ``[n]`` of little-endian uint32 (their
    results are read back as bytes: a little-endian host, as ggml's own decoders assume)."""
    words = np.ascontiguousarray(packed).view("<u4").reshape(packed.shape[0], count)
    return [words[:, i] for i in range(count)]


def _k_quant(b: np.ndarray, out: np.ndarray, fifth: bool) -> None:
    """Q4_K / Q5_K (``fifth``): x = (d * scale) * q - (dmin * min) per 32 elements; the
    low nibbles of bytes ``32 i ..`` are sub-block 2 i, the high ones 2 i + 1, and bit j
    of ``qh[l]`` is the fifth bit of element ``32 j + l``."""
    n = b.shape[0]
    sc, mn = _k_scale_min(b["scales"])
    codes = _codes(n, QK_K)
    _nibbles(b["qs"], 32, codes)
    if fifth:
        high = _planes(b["qh"].reshape(n, 1, 32), _BIT_SHIFTS, 1)
        _shift_left(high, 4)
        codes |= high.reshape(n, QK_K)
    _to_float(codes, out)
    o = out.reshape(n, 8, 32)
    o *= (_f32(b["d"], 1) * sc).reshape(n, 8, 1)
    o -= (_f32(b["dmin"], 1) * mn).reshape(n, 8, 1)


def q4_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles."""
    _k_quant(_struct("Q4_K", blocks), out, fifth=False)


def q5_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q5_K: as Q4_K plus 32 bytes of fifth bits before the nibbles."""
    _k_quant(_struct("Q5_K", blocks), out, fifth=True)


def q6_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q6_K: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d;
    x = (d * scale) * (q - 32) per sixteen elements. Nibbles go 64 bytes at a time (low
    ones first), and field k of ``qh[32 h + l]`` holds the two high bits of element
    ``128 h + 32 k + l``."""
    b = _struct("Q6_K", blocks)
    n = b.shape[0]
    codes = _codes(n, QK_K)
    _nibbles(b["ql"], 64, codes)
    high = _planes(b["qh"].reshape(n, 2, 32), _CRUMB_SHIFTS, 3)
    _shift_left(high, 4)
    codes |= high.reshape(n, QK_K)
    _to_float(codes, out, 32)
    _by_sixteen(out)[...] *= (_f32(b["d"], 1) * b["scales"].astype(_F32)).reshape(n, 16, 1)


def _book(qs: np.ndarray, out: np.ndarray) -> None:
    """``out = IQ4_VALUES[q]`` of IQ4's nibbles ``qs`` (``[n, m]`` bytes; in each 16, the
    low nibbles are 16 elements, then the high ones), two values per 8-byte gather: each
    pair of neighbouring elements' nibbles is first packed into one index byte, on
    uint16 lanes (bytes 2k, 2k + 1) of the whole band, so the gather writes element
    order (~4x faster than a gather per value)."""
    n = qs.shape[0]
    lanes = _lanes(qs)
    first = np.bitwise_or(lanes & _LANE_LOW, (lanes >> _W(4)) & _LANE_HIGH)  # low nibbles
    second = np.bitwise_or((lanes >> _W(4)) & _LANE_LOW, (lanes >> _W(8)) & _LANE_HIGH)
    halves = [x.view(np.uint16).astype(_U8).reshape(n, -1, 8) for x in (first, second)]
    index = np.stack(halves, axis=2)
    np.take(_IQ4_PAIRS, index.reshape(-1), out=out.reshape(-1).view(_W), mode="clip")


def iq4_nl(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ4_NL: f16 d, 16 bytes of nibbles indexing the code book; x = d * book[q]."""
    b = _struct("IQ4_NL", blocks)
    _book(b["qs"], out)
    out *= _f32(b["d"], 1)


def iq4_xs(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ4_XS: f16 d, 2 bytes of scale high bits, 4 of scale low nibbles, 128 of nibbles;
    x = (d * (scale - 32)) * book[q] per 32 elements (low nibbles of bytes ``16 j ..``
    first)."""
    b = _struct("IQ4_XS", blocks)
    n = b.shape[0]
    shifts = 2 * np.arange(8, dtype=np.uint16)
    high = ((b["scales_h"].reshape(n, 1) >> shifts) & 3).astype(_U8)
    packed = b["scales_l"]
    low = np.stack([packed & 0x0F, packed >> 4], axis=2).reshape(n, 8)
    dl = _f32(b["d"], 1) * ((low | (high << 4)).astype(_F32) - _F32(32))
    _book(b["qs"], out)
    o = out.reshape(n, 8, 32)
    o *= dl.reshape(n, 8, 1)


DECODERS: dict[str, Decoder] = {
    "Q8_0": q8_0, "Q4_0": q4_0, "Q4_1": q4_1, "Q5_0": q5_0, "Q5_1": q5_1,
    "Q2_K": q2_k, "Q3_K": q3_k, "Q4_K": q4_k, "Q5_K": q5_k, "Q6_K": q6_k,
    "IQ4_NL": iq4_nl, "IQ4_XS": iq4_xs,
}  # fmt: skip


def decode_rows(type_name: str, raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Dequantize ``raw`` (``[..., blocks * nbytes]`` uint8, whole blocks per row) of
    block type ``type_name`` to float32 ``[..., blocks * block]``, into ``out`` when given
    (C-contiguous float32 of that shape; a new array otherwise), in L2-sized bands on the
    worker threads. Products beyond float32's range are inf, without a warning, as
    ggml's are."""
    t = BY_NAME[type_name]
    blocks = np.ascontiguousarray(raw).reshape(-1, t.nbytes)
    shape = (*raw.shape[:-1], raw.shape[-1] // t.nbytes * t.block)
    if out is not None and (out.shape != shape or out.dtype != _F32 or not out.flags.c_contiguous):
        raise ValueError(
            f"decode_rows({type_name!r}): out= must be C-contiguous float32 {shape}, "
            f"not {out.dtype} {out.shape}"
        )
    result = np.empty(shape, _F32) if out is None else out
    values = result.reshape(-1, t.block)  # a view: ``out`` is C-contiguous
    decoder = DECODERS[type_name]
    step = max(1, BAND_ELEMENTS // t.block)

    def work(starts: Sequence[int]) -> None:
        with np.errstate(over="ignore", invalid="ignore"):
            for a in starts:
                decoder(blocks[a : a + step], values[a : a + step])

    run_on_threads(work, range(0, blocks.shape[0], step), RUNS_PER_TASK)
    return result
