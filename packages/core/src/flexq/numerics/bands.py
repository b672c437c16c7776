"""Cache-sized bands of work on the worker threads, for fast numpy decoders.

A dequantizer that decodes a large box in one numpy pass after another makes
each pass a trip to memory. These helpers cut the box into bands that stay in
a core's L2 cache and hand runs of bands to the worker threads
(:mod:`flexq.numerics.threads`), so every pass over a band finds it in cache.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from functools import partial
from types import EllipsisType
from typing import Any

import numpy as np

from flexq.numerics.rounding import float32_to_bfloat16_bits, round_band
from flexq.numerics.threads import run_on_threads

#: Byte-code arrays smaller than this are looked up directly (the pair table
#: costs ~1 ms to build once and threads cost more than they save).
_PAIR_MIN_CODES = 1 << 16
#: Codes per band: 256 Ki codes give 1 MiB of float32 results, so a band's
#: scale multiply finds it still in the core's L2 cache (bands of 8 MiB made
#: the multiply a second trip to memory and the lookup ~2x slower; measured
#: with bench/ on a 2-core EPYC with 1 MiB L2 per core).
_BAND_CODES = 1 << 18
#: Bands per task handed to a worker thread (8 MiB of float32 results).
RUNS_PER_TASK = 8
_pair_tables: dict[bytes, np.ndarray] = {}
#: Each worker thread's band buffer (:func:`_band_buffer`).
_local = threading.local()
#: :func:`run_in_bands_rounded`: the item type of ``rounded`` -> that of the float32 band
#: ``work`` fills (one float32 per bfloat16 value).
_BUFFER_ITEMS = {
    np.dtype(np.uint16): np.float32,
    np.dtype(np.uint32): np.uint64,
    np.dtype(np.uint64): np.complex128,
}

#: One band: integer indices on leading dims, then a slice of the next dim (``...``: the
#: whole of a 0-d array, which indexing by ``()`` would give as a scalar, not a view).
Band = tuple[int | slice | EllipsisType, ...]


def pairable(table: np.ndarray, codes: Any) -> bool:
    """Whether ``table[codes]`` can go through the two-codes-at-once pair table."""
    return (
        isinstance(codes, np.ndarray)
        and codes.dtype == np.uint8
        and codes.ndim > 0
        and table.shape == (256,)
        and table.dtype.itemsize == 4
        and codes.flags.c_contiguous
        and codes.size >= _PAIR_MIN_CODES
    )


#: A table entry's size in bytes -> the unsigned type holding two entries.
_TWO_ITEMS = {2: np.uint32, 4: np.uint64}


def code_pairs(table: np.ndarray) -> np.ndarray:
    """``table`` (256 entries of 2 or 4 bytes) over every pair of byte codes: 65536 items of
    two entries each (uint32 or uint64), indexed by the uint16 that two consecutive code
    bytes read as, for :func:`lookup_into`'s two codes per gather. Built in one broadcast
    (~0.1 ms); tables that change from tensor to tensor (a scale folded in) build their
    own, constant ones are kept (:func:`_pair_table`)."""
    two = np.empty((256, 256, 2), dtype=table.dtype)
    # index = high byte * 256 + low byte, and the first code in memory is the low byte
    # on a little-endian machine, the high one on a big-endian one.
    first, second = (table[None, :], table[:, None]) if np.little_endian else (
        table[:, None], table[None, :])  # fmt: skip
    two[..., 0] = first
    two[..., 1] = second
    return two.view(_TWO_ITEMS[table.dtype.itemsize]).reshape(1 << 16)


def _pair_table(table: np.ndarray) -> np.ndarray:
    """:func:`code_pairs` of a constant ``table`` (an element format's), built once."""
    key = table.dtype.str.encode() + table.tobytes()
    pairs = _pair_tables.get(key)
    if pairs is None:
        pairs = _pair_tables[key] = code_pairs(table)
    return pairs


def _bands(shape: tuple[int, ...], limit: int) -> list[Band]:
    """Split a C-contiguous array of ``shape`` into contiguous pieces of about ``limit``
    elements, in order: runs of dim 0 when one index of dim 0 is small enough,
    else the same split of each ``[i, ...]`` sub-array. Runs hold an even number
    of elements whenever the array's trailing size allows it."""
    inner = math.prod(shape[1:])
    if len(shape) == 1 or inner <= limit:
        step = max(1, limit // max(inner, 1))
        step += step % 2 if inner % 2 else 0
        return [(slice(a, min(a + step, shape[0])),) for a in range(0, shape[0], step)]
    return [(i, *rest) for i in range(shape[0]) for rest in _bands(shape[1:], limit)]


def _scale_band(scale: np.ndarray, band: Band) -> np.ndarray:
    """The part of ``scale`` (each dim 1 or equal to the codes') that a codes band uses."""
    index = tuple(
        (0 if isinstance(ix, int) else slice(None)) if n == 1 else ix
        for ix, n in zip(band, scale.shape, strict=False)
    )
    return scale[index]


#: Work on one band: (codes band, output band, the matching part of each side array).
BandWork = Callable[..., None]


def run_in_bands(
    work: BandWork, codes: np.ndarray, out: np.ndarray, *side: np.ndarray
) -> np.ndarray:
    """Run ``work(codes_band, out_band, *side_parts)`` over cache-sized bands of
    ``codes`` on the worker threads; returns ``out``.

    For decoders with their own per-band math. ``codes`` and ``out`` are
    C-contiguous numpy arrays of one shape (their dtypes may differ); each
    ``side`` array (scales, zero points) broadcasts against them as in numpy
    (trailing dims aligned, each dim 1 or equal, at most their rank), and
    ``work`` gets the part of it that lines up with its band, with their rank. Bands
    are about :data:`_BAND_CODES` elements, so a band's several passes find it
    still in the core's L2 cache; worker threads take runs of up to
    :data:`RUNS_PER_TASK` contiguous bands (runs keep the threads from trading the
    GIL at every band; see :func:`flexq.numerics.threads.run_on_threads`). Work on bands must
    be elementwise: bands are done in no particular order.
    """
    _each_band(lambda band, parts: work(codes[band], out[band], *parts), codes, side)
    return out


def run_in_bands_rounded(
    work: BandWork, codes: np.ndarray, rounded: np.ndarray, *side: np.ndarray
) -> np.ndarray:
    """:func:`run_in_bands` into bfloat16: ``work`` writes each band's float32 values into
    a band-sized buffer of its thread, and each band is rounded into ``rounded`` while it
    is still in cache; returns ``rounded``.

    ``rounded`` is C-contiguous, of ``codes``' shape, and holds the bits of one bfloat16
    value per code (uint16: a bfloat16 target's memory, ``BoxSources.rounded_out``), of
    two (uint32: that memory viewed so, for a byte of two 4-bit codes) or of four
    (uint64); ``work``'s band then holds one float32 per code, or two as one uint64 item,
    or four as one complex128 item (as :func:`run_in_bands` would give it for a float32
    ``out`` viewed so). The bits are the core's
    (:func:`flexq.numerics.rounding.float32_to_bfloat16_bits` of the float32 a
    :func:`run_in_bands` decode gives), without a box-sized float32 array: its write and
    its read back for the rounding were two trips to memory per value.
    """
    known = rounded.dtype in _BUFFER_ITEMS
    if not known or rounded.shape != codes.shape or not rounded.flags.c_contiguous:
        raise ValueError(
            f"run_in_bands_rounded: rounded must be C-contiguous uint16, uint32 or uint64 "
            f"{codes.shape}, not {rounded.dtype} {rounded.shape}"
        )
    per = rounded.dtype.itemsize // 2  # bfloat16 values per code

    def each(band: Band, parts: tuple[np.ndarray, ...]) -> None:
        c = codes[band]
        round_in_cache(lambda values: work(c, values, *parts), rounded[band])

    # Bands of as many values (not codes) as run_in_bands' float32 ones: a band and its
    # rounding then fit the core's L2 cache together.
    _each_band(each, codes, side, _BAND_CODES // per)
    return rounded


def _each_band(
    each: Callable[[Band, tuple[np.ndarray, ...]], None],
    codes: np.ndarray,
    side: Sequence[np.ndarray],
    limit: int | None = None,
) -> None:
    """``each(band, side_parts)`` over bands of about ``limit`` codes (default
    :data:`_BAND_CODES`) of ``codes`` on the worker threads, runs of up to
    :data:`RUNS_PER_TASK` bands per task."""
    size = _BAND_CODES if limit is None else max(1, limit)
    bands = _bands(codes.shape, size) if codes.ndim else [(...,)]
    # Leading 1s give each side array the codes' rank, so bands index it alike.
    ranked = tuple(x.reshape((1,) * (codes.ndim - x.ndim) + x.shape) for x in side)

    def run(part: Sequence[Band]) -> None:
        for band in part:
            each(band, tuple(_scale_band(x, band) for x in ranked))

    run_on_threads(run, bands, RUNS_PER_TASK)


def round_in_cache(fill: Callable[[np.ndarray], None], rounded: np.ndarray) -> None:
    """``fill`` a float32 band in a buffer of this thread, then round it into ``rounded``
    (bfloat16 bits) while it is still in cache: the core's bits
    (:func:`flexq.numerics.rounding.float32_to_bfloat16_bits`), no band-sized allocation.

    ``rounded`` is a C-contiguous band of a bfloat16 target's memory: uint16 (``fill``
    gets float32 of its shape), or uint32 / uint64 items of two / four values each
    (``fill`` gets uint64 / complex128 items of its shape, each as many float32 values,
    as for a float32 array viewed so). For a decoder's own loop over bands; the kit's
    banded helpers call it for each band when given ``rounded``.
    """
    items = _BUFFER_ITEMS[rounded.dtype]
    values = _band_buffer(rounded.size * (rounded.dtype.itemsize // 2))
    fill(values.view(items).reshape(rounded.shape))
    round_band(values, rounded.reshape(-1).view(np.uint16))


def banded_output(
    shape: Sequence[int], out: np.ndarray | None, rounded: np.ndarray | None
) -> np.ndarray:
    """The one output a decode's bands are written into (each through :func:`fill_band`):
    ``rounded`` (a bfloat16 target's bits) when given, else ``out``, else a new float32
    array of ``shape``."""
    if rounded is not None:
        return rounded
    return np.empty(tuple(shape), np.float32) if out is None else out


def fill_band(fill: Callable[[np.ndarray], None], band: np.ndarray) -> None:
    """``fill`` one band of an output: a float32 band directly, a band of a bfloat16
    target's bits (uint16) through :func:`round_in_cache`. For decoders that write either
    output through one loop (whole rows: :func:`decode_in_row_bands`; GGUF, MXFP4's
    transposed experts)."""
    if band.dtype == np.uint16:
        round_in_cache(fill, band)
    else:
        fill(band)


def _band_buffer(size: int) -> np.ndarray:
    """This thread's reused float32 buffer, its first ``size`` values, for a band decoded
    then rounded while in cache (a fresh array per
    band would be mapped afresh, its page faults costing more than the band's work)."""
    buf: np.ndarray | None = getattr(_local, "band", None)
    if buf is None or buf.size < size:
        buf = _local.band = np.empty(size, np.float32)
    return buf[:size]


def row_bands(rows: int, row_elements: int) -> list[range]:
    """Consecutive runs of ``rows`` rows of ``row_elements`` output elements each,
    each about one cache-sized band (:data:`_BAND_CODES` elements, one row at
    least), for decoders whose bands are whole rows; hand them to
    :func:`flexq.numerics.threads.run_on_threads` with at most :data:`RUNS_PER_TASK` per task
    (:func:`run_in_row_bands` does both)."""
    step = max(1, _BAND_CODES // max(1, row_elements))
    return [range(a, min(a + step, rows)) for a in range(0, rows, step)]


def run_in_row_bands(work: Callable[[Sequence[range]], None], rows: int, row_elements: int) -> None:
    """Call ``work`` on the :func:`row_bands` of ``rows`` output rows of ``row_elements``
    elements, on the worker threads, at most :data:`RUNS_PER_TASK` runs per call
    (for decoders whose bands are whole rows; runs are done in no particular order)."""
    run_on_threads(work, row_bands(rows, row_elements), RUNS_PER_TASK)


def decode_in_row_bands(
    work: Callable[[range, np.ndarray], None],
    shape: Sequence[int],
    out: np.ndarray | None = None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """``work(run, values)`` for each :func:`row_bands` run of an output of ``shape``
    (``[rows, ...]``), on the worker threads: ``work`` writes the float32 values of rows
    ``run`` into ``values`` (``[len(run), ...]``). Returns the output.

    ``values`` is ``out[run]`` (``out``: C-contiguous float32 of ``shape``, made when
    None), or, with ``rounded`` (C-contiguous uint16 of ``shape``: a bfloat16 target's
    memory, ``BoxSources.rounded_out``), a buffer of its thread whose values are rounded
    into ``rounded[run]`` right after, while in cache: the core's bits
    (:func:`flexq.numerics.rounding.float32_to_bfloat16_bits`) without a box-sized float32
    array. For decoders whose bands are whole rows (GPTQ, AWQ, compressed-tensors).
    """
    shape = tuple(shape)
    if rounded is not None and (
        rounded.dtype != np.uint16 or rounded.shape != shape or not rounded.flags.c_contiguous
    ):
        raise ValueError(
            f"decode_in_row_bands: rounded must be C-contiguous uint16 {shape}, "
            f"not {rounded.dtype} {rounded.shape}"
        )
    result = banded_output(shape, out, rounded)
    row_elements = math.prod(shape[1:])

    def run(runs: Sequence[range]) -> None:
        for rows in runs:
            fill_band(partial(work, rows), result[rows.start : rows.stop])

    run_in_row_bands(run, shape[0] if shape else 1, row_elements)
    return result


def lookup_into(
    table: np.ndarray, codes: np.ndarray, out: np.ndarray, pairs: np.ndarray | None = None
) -> None:
    """``out[...] = table[codes]`` for uint8 ``codes`` and a 256-entry table of 2- or
    4-byte items, two codes per lookup through the pair table when ``codes`` allows it:
    ``pairs`` (:func:`code_pairs` of ``table``, for a table the caller built), else the
    one kept for ``table``."""
    if codes.size % 2 or not codes.flags.c_contiguous or not out.flags.c_contiguous:
        out[...] = table[codes]
        return
    pairs = _pair_table(table) if pairs is None else pairs
    flat = codes.reshape(-1).view(np.uint16)
    np.take(pairs, flat, out=out.reshape(-1).view(pairs.dtype), mode="clip")


def lookup_rounded(
    table: np.ndarray, codes: np.ndarray, scale: float | np.floating[Any], out: np.ndarray
) -> np.ndarray:
    """The bfloat16 bits of ``table[codes] * scale`` into ``out``, for numpy integer
    ``codes`` under one scale and a C-contiguous uint16 ``out`` of their shape (a bfloat16
    target's memory, ``BoxSources.rounded_out``); returns ``out``. C-contiguous uint8
    codes go band by band on the worker threads, two codes per gather; other codes (a
    strided box, wider integers) in one gather of the same bits.

    Each of the 256 codes has one float32 product with the scale, the one a float32
    decode computes, and one rounding of it, the core's own
    (:func:`flexq.numerics.rounding.float32_to_bfloat16_bits`): a table of their bits,
    looked up two codes at a time, is the rounded result, NaN and all, without the float32
    pass over the box and the rounding's passes (one FP8 scale: ~2.5x less time). A NaN
    code times a NaN scale is a NaN of either sign, as in a float32 decode (numpy's
    multiply returns one operand's NaN or the other's, depending on its loop).

    :param table: the 256 code values, float32 (``E4M3_TO_FLOAT32``...).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        products = np.asarray(table, np.float32) * np.float32(scale)
    bits = float32_to_bfloat16_bits(products)
    if codes.dtype != np.uint8 or not codes.flags.c_contiguous:
        out[...] = bits[codes]
        return out
    pairs = code_pairs(bits)
    return run_in_bands(lambda c, o: lookup_into(bits, c, o, pairs), codes, out)


def pair_items(pairs: np.ndarray) -> np.ndarray:
    """A [256, 2] float32 pair table (:func:`flexq.formatkit.nibble_pairs`) as 256 items
    of 8 bytes: one gather per code byte copies both of its values (numpy gathers one
    8-byte item ~2x faster than two float32 from a [256, 2] table)."""
    return np.ascontiguousarray(pairs, dtype=np.float32).view(np.uint64).reshape(-1)


def lookup_scaled(
    items: np.ndarray,
    codes: np.ndarray,
    out: np.ndarray | None,
    scale: np.ndarray,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """Blocks of codes looked up and scaled, band by band on the worker threads; returns ``out``
    (or ``rounded``).

    For block-scaled formats whose code bytes decode through a table of wide items
    (:func:`pair_items`: two float32 per byte; or four per uint16 code pair):
    ``out[..., j, :]`` gets ``items[codes[..., j, :]]`` and then each of its float32
    values is multiplied by ``scale[..., j, 0]``, while the band is still in cache.

    :param items: the lookup table (``take`` with ``mode="clip"``: a code never exceeds it).
    :param codes: C-contiguous integer codes ``[..., blocks, m]``.
    :param out: C-contiguous ``[..., blocks, m]`` of ``items``' dtype (a view of the float32
        result), written in place.
    :param scale: float32 ``[..., blocks, 1]``, one scale per block. Products beyond
        float32's range are inf, by definition, without a warning.
    :param rounded: None, or the bfloat16 bits' array (``BoxSources.rounded_out`` viewed
        with one item per code: uint32 for two values, uint64 for four) that takes the
        result instead of ``out``, each band rounded while in cache
        (:func:`run_in_bands_rounded`).
    """

    def work(c: np.ndarray, o: np.ndarray, s: np.ndarray) -> None:
        np.take(items, c, out=o, mode="clip")
        values = o.view(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            values *= s

    if rounded is not None:
        return run_in_bands_rounded(work, codes, rounded, scale)
    assert out is not None
    return run_in_bands(work, codes, out, scale)


#: :func:`lookup_blocks`: a table item's size in bytes -> the item type of a bfloat16
#: target's bits holding as many values (two float32 per uint64: two bfloat16 per uint32).
_ROUNDED_ITEMS = {8: np.uint32, 16: np.uint64}


def lookup_blocks(
    items: np.ndarray,
    codes: np.ndarray,
    scale: np.ndarray,
    out: np.ndarray | None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`lookup_scaled` into a decode's own output, for block-scaled codes
    ``[..., blocks, m]`` of ``items`` (two or four float32 values each): the values,
    ``[..., blocks * block]`` (``block`` = ``m`` times the values per item), go into
    ``rounded`` as bfloat16 bits when it is given and C-contiguous (a bfloat16 target's
    memory, ``BoxSources.rounded_out``), else as float32 into ``out`` (C-contiguous, of
    any shape of that size) or a new ``[..., blocks * block]`` array. Returns the array
    filled, as given: the one call of bitsandbytes, NVFP4, MXFP4 and Quark's MXFP4
    whole-block decodes, with the views each output needs.
    """
    lead, per = tuple(codes.shape[:-1]), items.dtype.itemsize // 4
    shape = (*lead, codes.shape[-1] * per)
    flat = (*lead[:-1], math.prod(shape[-2:]))
    if rounded is not None and rounded.flags.c_contiguous:
        bits = rounded.reshape(shape).view(_ROUNDED_ITEMS[items.dtype.itemsize])
        lookup_scaled(items, codes, None, scale, bits)
        return rounded
    result = np.empty(flat, np.float32) if out is None else out
    lookup_scaled(items, codes, result.reshape(shape).view(items.dtype), scale)
    return result


def banded_lookup(
    table: np.ndarray, codes: np.ndarray, scale: np.ndarray | None, out: np.ndarray | None
) -> np.ndarray:
    """``table[codes]`` (times ``scale`` if given) for uint8 codes, band by band.

    Each band is looked up two codes at a time through the pair table and then
    scaled while it is still in cache. Exact: every value is a copy of a table
    entry's bits times its float32 scale. Products beyond float32's range are inf.
    """

    def work(c: np.ndarray, o: np.ndarray, *s: np.ndarray) -> None:
        lookup_into(table, c, o)
        if s:
            with np.errstate(over="ignore", invalid="ignore"):
                o *= s[0]

    result = np.empty(codes.shape, table.dtype) if out is None else out
    return run_in_bands(work, codes, result, *(() if scale is None else (scale,)))
