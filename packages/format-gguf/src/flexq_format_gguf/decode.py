"""Vectorised numpy decoders of ggml's block types, exact in float32, band by band.

For the format's apply step and the bench. :func:`decode_rows` cuts a box's blocks into
bands whose float32 output fits a core's L2 cache and hands runs of bands to the kit's
worker threads (:func:`flexq.formatkit.run_parts`); each decoder turns one band of
blocks, a ``uint8`` array ``[n, nbytes]``, into its float32 ``[n, block]`` in place.

A band is read through a structured view of its block struct (ggml-common.h's
``block_q*``), so ``d`` / ``dmin`` / ``scales`` / ``qs`` are strided fields and no
Python runs per block. Packed quants decode by table: one gather per byte gives its two
nibbles (or four 2-bit fields) as float32 side by side in one 8- or 16-byte item, with
the format's offset folded in where it is exact; the fifth / sixth / third bits come
from a second table per byte. The gathered values are in byte order, so the scale
multiply reads them through a transposed view and writes ggml's element order straight
into the output: the permutation costs no pass of its own.

The arithmetic is ggml's own, in its order (a block's scale times its sub-block scale,
rounded to float32, times the exact small-integer quant, then minus the min term: no
fused multiply-add), so every value equals what llama.cpp's reference dequantizer and
gguf-py's ``gguf.quants.dequantize`` give, bit for bit, NaN and infinite scales
included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flexq.formatkit import RUNS_PER_TASK, code_table, nibble_pairs, pair_items, run_parts
from flexq_format_gguf.ggml import BY_NAME, QK_K

#: Decode of one band: (blocks ``[n, nbytes]`` uint8, C-contiguous; out ``[n, block]``
#: float32, C-contiguous), filled in place.
Decoder = Callable[[np.ndarray, np.ndarray], None]
_F32 = np.float32
#: float32 elements one band decodes: 256 KiB of output, its gathered quants as much
#: again, so every pass over a band finds it in a 1 MiB L2 cache (bands of 1 MiB of
#: output were ~1.3x slower on the bench's 2-core EPYC).
BAND_ELEMENTS = 1 << 16
#: IQ4_NL / IQ4_XS: the non-linear 4-bit code book (ggml's kvalues_iq4nl).
IQ4_VALUES = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32
)


def _nibbles(minus: float = 0.0, book: np.ndarray | None = None) -> np.ndarray:
    """byte -> its (low, high) nibble as float32, less ``minus`` or through ``book``, as
    one uint64 item (a gather copies both)."""
    values = np.arange(16, dtype=_F32) - _F32(minus) if book is None else book
    return pair_items(nibble_pairs(values))


def _bit_rows(bits: int, weight: float, base: float = 0.0) -> np.ndarray:
    """byte -> its ``8 // bits`` fields (low bits first) times ``weight`` plus ``base``,
    float32 ``[256, 8 // bits]`` rows (gathered with ``np.take(..., axis=0)``)."""
    rows = code_table(bits) * _F32(weight) + _F32(base)
    return np.ascontiguousarray(rows, dtype=_F32)


_Q4_MINUS8 = _nibbles(8)
_Q4 = _nibbles()
_Q5_MINUS16 = _nibbles(16)
_Q6_MINUS32 = _nibbles(32)
_IQ4 = _nibbles(book=IQ4_VALUES)
#: byte -> its four 2-bit fields as float32, one 16-byte item.
_CRUMBS = np.ascontiguousarray(code_table(2)).view(np.complex128).reshape(256)
#: byte -> 16 x each of its eight bits (the fifth bit of eight quants).
_HIGH_BITS = _bit_rows(1, 16)
#: byte -> 16 x each of its four 2-bit fields (Q6_K's two high bits of four quants).
_HIGH_CRUMBS = _bit_rows(2, 16)
#: byte -> -4 for each clear bit, 0 for a set one (Q3_K stores the complement).
_Q3_MASK = _bit_rows(1, 4, -4)


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


def _gather(items: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``items[codes]`` (one wide item per code byte) as float32, the items' values last."""
    got = np.take(items, codes, mode="clip")
    values: np.ndarray = got.view(_F32).reshape(*codes.shape, -1)
    return values


def _rows(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``table[codes]`` for a ``[256, k]`` table: ``[*codes.shape, k]`` float32."""
    out: np.ndarray = np.take(table, codes, axis=0, mode="clip")
    return out


def q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q8_0: f16 d, 32 int8; x = q * d."""
    b = _struct("Q8_0", blocks)
    np.multiply(b["qs"], _f32(b["d"], 1), out=out)


def _q4_into(b: np.ndarray, items: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``d * items[qs]`` of a 32-element block type (low nibbles are elements 0..15, high
    ones 16..31) into ``out`` viewed ``[n, 2, 16]``; returns that view."""
    n = b.shape[0]
    o = out.reshape(n, 2, 16)
    np.multiply(_gather(items, b["qs"]).transpose(0, 2, 1), _f32(b["d"], 1, 1), out=o)
    return o


def q4_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q4_0: f16 d, 16 bytes of nibbles; x = (q - 8) * d (q - 8 exact, in the table)."""
    _q4_into(_struct("Q4_0", blocks), _Q4_MINUS8, out)


def q4_1(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = q * d + m."""
    b = _struct("Q4_1", blocks)
    _q4_into(b, _Q4, out)
    out += _f32(b["m"], 1)


def iq4_nl(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ4_NL: f16 d, 16 bytes of nibbles indexing the code book; x = d * book[q]."""
    _q4_into(_struct("IQ4_NL", blocks), _IQ4, out)


def _q5_into(b: np.ndarray, items: np.ndarray, out: np.ndarray) -> None:
    """``d * (items[qs] + 16 * high bit)`` of a Q5_0/Q5_1 block into ``out``: bit j of the
    little-endian 32-bit ``qh`` is element j's fifth bit (exact sums of small integers)."""
    n = b.shape[0]
    o = out.reshape(n, 2, 16)
    high = _rows(_HIGH_BITS, b["qh"]).reshape(n, 2, 16)
    np.add(_gather(items, b["qs"]).transpose(0, 2, 1), high, out=o)
    o *= _f32(b["d"], 1, 1)


def q5_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q5_0: f16 d, 32 high bits, 16 bytes of nibbles; x = (q - 16) * d."""
    _q5_into(_struct("Q5_0", blocks), _Q5_MINUS16, out)


def q5_1(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q5_1: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; x = q * d + m."""
    b = _struct("Q5_1", blocks)
    _q5_into(b, _Q4, out)
    out += _f32(b["m"], 1)


def _crumbs(qs: np.ndarray) -> np.ndarray:
    """Q2_K/Q3_K's 64 bytes of 2-bit quants as float32 ``[n, 2, 4, 2, 16]`` in element
    order (half of the block, shift, sixteen, element): field k of byte ``32 h + l`` is
    element ``128 h + 32 k + l``."""
    n = qs.shape[0]
    return _gather(_CRUMBS, qs).reshape(n, 2, 2, 16, 4).transpose(0, 1, 4, 2, 3)


def q2_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q2_K: 16 scale bytes (4-bit scale, 4-bit min), 64 bytes of 2-bit quants, f16 d, dmin;
    x = (d * scale) * q - (dmin * min) per sixteen elements."""
    b = _struct("Q2_K", blocks)
    n = b.shape[0]
    scales = b["scales"]
    dl = _f32(b["d"], 1) * (scales & 0x0F).astype(_F32)
    ml = _f32(b["dmin"], 1) * (scales >> 4).astype(_F32)
    o = out.reshape(n, 2, 4, 2, 16)
    np.multiply(_crumbs(b["qs"]), dl.reshape(n, 2, 4, 2, 1), out=o)
    o -= ml.reshape(n, 2, 4, 2, 1)


def q3_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q3_K: 32 bytes of high-bit mask, 64 of 2-bit quants, 12 of 6-bit scales, f16 d;
    x = (d * (scale - 32)) * (q - 4 * (mask bit clear)) per sixteen elements."""
    b = _struct("Q3_K", blocks)
    n = b.shape[0]
    packed = b["scales"]
    low = np.stack([packed[:, :8] & 0x0F, packed[:, :8] >> 4], axis=1).reshape(n, 16)
    high = (packed[:, 8:].reshape(n, 1, 4) >> np.array([0, 2, 4, 6], np.uint8)[:, None]) & 3
    scales = (low | (high.reshape(n, 16) << 4)).astype(_F32) - _F32(32)
    dl = _f32(b["d"], 1) * scales
    # Bit 4 h + k of mask byte l belongs to element 128 h + 32 k + l.
    mask = _rows(_Q3_MASK, b["hmask"]).reshape(n, 2, 16, 2, 4).transpose(0, 3, 4, 1, 2)
    o = out.reshape(n, 2, 4, 2, 16)
    np.add(_crumbs(b["qs"]), mask, out=o)
    o *= dl.reshape(n, 2, 4, 2, 1)


def _k_scale_min(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins of Q4_K/Q5_K's 12 bytes, float32 ``[n, 8]`` each
    (a whole band's superblocks at once)."""
    d, m, md = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc.astype(_F32), mn.astype(_F32)


def _k_quant(b: np.ndarray, out: np.ndarray, fifth: bool) -> None:
    """Q4_K / Q5_K (``fifth``): x = (d * scale) * q - (dmin * min) per 32 elements; the
    low nibbles of bytes ``32 i ..`` are sub-block 2 i, the high ones 2 i + 1, and bit j
    of ``qh[l]`` is the fifth bit of element ``32 j + l``."""
    n = b.shape[0]
    sc, mn = _k_scale_min(b["scales"])
    dl = (_f32(b["d"], 1) * sc).reshape(n, 4, 2, 1)
    ml = (_f32(b["dmin"], 1) * mn).reshape(n, 4, 2, 1)
    q = _gather(_Q4, b["qs"]).reshape(n, 4, 32, 2).transpose(0, 1, 3, 2)
    o = out.reshape(n, 4, 2, 32)
    if fifth:
        high = _rows(_HIGH_BITS, b["qh"]).transpose(0, 2, 1).reshape(n, 4, 2, 32)
        np.add(q, high, out=o)
        o *= dl
    else:
        np.multiply(q, dl, out=o)
    o -= ml


def q4_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles."""
    _k_quant(_struct("Q4_K", blocks), out, fifth=False)


def q5_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q5_K: as Q4_K plus 32 bytes of fifth bits before the nibbles."""
    _k_quant(_struct("Q5_K", blocks), out, fifth=True)


def q6_k(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q6_K: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d;
    x = (d * scale) * (q - 32) per sixteen elements. In half h, nibble p of byte
    ``64 h + 32 s + l`` is element ``128 h + 64 p + 32 s + l``, and field ``2 p + s`` of
    ``qh[32 h + l]`` its two high bits."""
    b = _struct("Q6_K", blocks)
    n = b.shape[0]
    low = _gather(_Q6_MINUS32, b["ql"]).reshape(n, 2, 2, 32, 2).transpose(0, 1, 4, 2, 3)
    high = _rows(_HIGH_CRUMBS, b["qh"]).reshape(n, 2, 32, 2, 2).transpose(0, 1, 3, 4, 2)
    np.add(low, high, out=out.reshape(n, 2, 2, 2, 32))
    dl = _f32(b["d"], 1) * b["scales"].astype(_F32)
    o = out.reshape(n, 16, 16)
    o *= dl.reshape(n, 16, 1)


def iq4_xs(blocks: np.ndarray, out: np.ndarray) -> None:
    """IQ4_XS: f16 d, 2 bytes of scale high bits, 4 of scale low nibbles, 128 of nibbles;
    x = (d * (scale - 32)) * book[q] per 32 elements (low nibbles of bytes ``16 j ..``
    first)."""
    b = _struct("IQ4_XS", blocks)
    n = b.shape[0]
    shifts = 2 * np.arange(8, dtype=np.uint16)
    high = ((b["scales_h"].reshape(n, 1) >> shifts) & 3).astype(np.uint8)
    packed = b["scales_l"]
    low = np.stack([packed & 0x0F, packed >> 4], axis=2).reshape(n, 8)
    dl = _f32(b["d"], 1) * ((low | (high << 4)).astype(_F32) - _F32(32))
    o = out.reshape(n, 8, 2, 16)
    q = _gather(_IQ4, b["qs"]).reshape(n, 8, 16, 2).transpose(0, 1, 3, 2)
    np.multiply(q, dl.reshape(n, 8, 1, 1), out=o)


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
    result = np.empty(shape, _F32) if out is None else out
    values = result.reshape(-1, t.block)  # a view: ``out`` is C-contiguous
    decoder = DECODERS[type_name]
    step = max(1, BAND_ELEMENTS // t.block)

    def work(starts: Sequence[int]) -> None:
        with np.errstate(over="ignore", invalid="ignore"):
            for a in starts:
                decoder(blocks[a : a + step], values[a : a + step])

    run_parts(work, range(0, blocks.shape[0], step), RUNS_PER_TASK)
    return result
