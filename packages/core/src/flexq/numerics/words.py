"""Packed integer words: small codes stored LSB-first in int32 words, unpacked on the CPU.

For formats that pack codes of 1 to 8 bits into little-endian words, element ``j`` of
a row at bits ``bits*j ..`` of its bit stream (GPTQ's qweight and qzeros with 2, 3, 4
or 8 bits, compressed-tensors ``pack-quantized`` of any width, dense or padded).
Read as bytes, a row of 1/2/4-bit codes is its codes in order, byte by byte, so one
table lookup per byte unpacks it: :func:`code_table` is that table; :func:`unpack_into`
is the one unpacker of every width (the lookup; for 4 bits integer passes spreading
each byte's nibbles, then one conversion; for 8 bits a plain conversion, a byte
being its code; for 3 bits, where every 3 bytes hold 8 codes, integer passes spreading
them into 8 bytes (:func:`triple_table` holds the same codes as a table); shift passes
per code position for other widths that cross words), and :func:`pack_words` its
inverse for encoders.
:func:`transposed_words` gives the rows of words packed along the first axis (GPTQ's
qweight, AWQ GEMM's). Codes packed across output rows (AutoAWQ's GEMM packing: AWQ
GEMM, AMD Quark's int4/uint4) are :func:`unpack_slots_into`'s, banded with their zeros
and scales by :func:`decode_slot_groups`. Devices use
:meth:`ArrayOps.unpack <flexq.formatkit.ArrayOps.unpack>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import gcd
from typing import Any, TypeAlias, Union

import numpy as np

from flexq.numerics.bands import banded_output, fill_band, run_in_row_bands

#: Codes per byte -> a numpy item as wide as that many float32 (one gather copies them all).
_ITEMS: dict[int, type[np.generic]] = {2: np.uint64, 4: np.complex128}
_TABLES: dict[tuple[int, float], np.ndarray] = {}
_TRIPLE_TABLES: dict[float, np.ndarray] = {}
#: What the private unpackers take off each code: a number, or uint8 zero points per
#: group ``[R, G]`` (:func:`unpack_less_zeros`).
_Minus: TypeAlias = Union[float, np.ndarray]  # noqa: UP007  (a runtime alias)
#: id of a float32 table -> (that table, its int32 twin).
_INT_TABLES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def code_table(bits: int, minus: float = 0.0) -> np.ndarray:
    """Every byte's ``8 // bits`` codes (low bits first) less ``minus``, as float32
    ``[256, 8 // bits]`` (``bits`` dividing 8; built once per ``(bits, minus)``).

    ``minus`` (a small integer, so the difference is exact) folds a code offset
    into the lookup: one pass less for formats that subtract a fixed zero point.
    """
    if bits not in (1, 2, 4, 8):
        raise ValueError(f"byte tables hold codes of 1, 2, 4 or 8 bits, not {bits}")
    table = _TABLES.get((bits, minus))
    if table is None:
        per = 8 // bits
        byte = np.arange(256, dtype=np.uint32)[:, None]
        shifts = (np.arange(per, dtype=np.uint32) * bits)[None, :]
        codes = (byte >> shifts) & np.uint32((1 << bits) - 1)
        table = np.ascontiguousarray(codes.astype(np.float32) - np.float32(minus))
        _TABLES[bits, minus] = table
    return table


def unpack_into(
    words: np.ndarray,
    bits: int,
    out: np.ndarray,
    minus: float = 0.0,
    *,
    first_bit: int = 0,
    per_word: int | None = None,
) -> None:
    """The codes of each row of words ``[R, W]`` (any integer dtype, packed LSB-first
    along the last axis) into float32 ``out`` ``[R, C]``, each less ``minus`` (or into
    int32 ``out``: the codes as indexes, for decoders that look each code up again, e.g.
    per group): the one unpacker of the GPTQ lineage (GPTQ's qweight and qzeros,
    compressed-tensors ``pack-quantized``), the inverse of :func:`pack_words`.

    Code ``j`` of a row starts at stream bit ``first_bit + bits * j`` (one dense bit
    stream: codes cross word boundaries where ``bits`` does not divide 32, as GPTQ's
    3 bits and compressed-tensors >= 0.18 odd widths do), or with ``per_word`` ``k`` at
    slot ``(s + j) % k`` of word ``(s + j) // k``, ``s = first_bit // bits`` (the top
    bits of each word unused: compressed-tensors 0.17). ``first_bit`` (below 32) is
    where the row's first wanted code starts in its first word, for a box of words that
    begins inside a packed row. Column-packed words (packed along dim 0) are unpacked
    as the rows of their transpose.

    Widths 1 and 2 take one table lookup per byte (several codes per lookup as one
    wide item), 4 bits integer passes spreading each byte's nibbles, 8 bits a
    conversion, dense 3 bits integer passes spreading each 3 bytes into 8; other widths
    a pass per code position of a unit (the smallest run of whole words holding whole
    codes), or a gather by bit position when the row starts
    inside a unit. Codes are small integers, so the result is exact.
    """
    if out.dtype not in (np.float32, np.int32):
        raise ValueError(f"codes unpack into float32 or int32, not {out.dtype}")
    if not np.little_endian:
        words = words.astype(words.dtype.newbyteorder("<"))
    count = out.shape[1] if out.ndim == 2 else 0
    if out.size == 0:
        return
    if 8 % bits == 0 and first_bit % 8 == 0:
        _by_bytes(words, bits, out, minus, first_bit // 8)
        return
    if bits == 3 and per_word is None and first_bit % 24 == 0:
        _by_triples(words, out, minus, first_bit // 8)
        return
    w32 = np.ascontiguousarray(words).view(np.uint32)
    if per_word is None or 8 % bits == 0:
        unit_codes, unit_words = 32 // gcd(32, bits), bits // gcd(32, bits)
    else:
        unit_codes, unit_words = per_word, 1
    if first_bit == 0:
        _by_units(w32, bits, out, minus, unit_codes, unit_words)
        return
    bit = code_positions(count, bits, first_bit=first_bit, per_word=per_word)
    np.subtract(gather_codes(w32, bits, bit), np.float32(minus), out=out, casting="unsafe")


def code_positions(
    count: int, bits: int, *, first_bit: int = 0, per_word: int | None = None
) -> np.ndarray:
    """The stream bit (int64) at which each of ``count`` codes starts, laid out as
    :func:`unpack_into` reads them (dense from ``first_bit``, or ``per_word`` per word)."""
    j = np.arange(count, dtype=np.int64)
    if per_word is None or 8 % bits == 0:
        return first_bit + j * bits
    slot = first_bit // bits + j
    return (slot // per_word) * 32 + (slot % per_word) * bits


def _by_bytes(words: np.ndarray, bits: int, out: np.ndarray, minus: float, skip: int) -> None:
    """Widths dividing 8: each byte's codes from one lookup (8 bits: the byte converted),
    from byte ``skip`` of each row."""
    raw = np.ascontiguousarray(words).view(np.uint8)
    per = 8 // bits
    count = out.shape[1]
    if per == 1:
        # A conversion, not a gather: several times faster than a table; any out layout.
        np.copyto(out, raw[:, skip : skip + count], casting="unsafe")
        if minus:
            out -= out.dtype.type(minus)  # small integers: exact
        return
    nbytes = -(-count // per)
    if skip or nbytes != raw.shape[1]:
        raw = np.ascontiguousarray(raw[:, skip : skip + nbytes])
    dst = out if nbytes * per == count and out.flags.c_contiguous else None
    if dst is None:
        dst = np.empty((out.shape[0], nbytes * per), out.dtype)
    if per == 2 and np.little_endian:
        _nibbles(raw, dst, minus)
    elif per in _ITEMS:
        table = _as(code_table(bits, minus), out.dtype)
        item = _ITEMS[per]
        np.take(
            table.view(item).reshape(256), raw, out=dst.view(item).reshape(raw.shape), mode="clip"
        )
    else:
        table = _as(code_table(bits, minus), out.dtype)
        np.take(table, raw, axis=0, out=dst.reshape(*raw.shape, per), mode="clip")
    if dst is not out:
        out[...] = dst[:, :count]


def _nibbles(raw: np.ndarray, dst: np.ndarray, minus: _Minus) -> None:
    """Both 4-bit codes of each byte of ``raw`` ``[R, B]`` (low nibble first) less
    ``minus`` into ``dst`` ``[R, 2B]``: integer passes and one conversion, about twice
    as fast as a gather of float32 pairs (numpy's take widens every index to intp).

    Each byte spreads into a uint16 whose low byte is its low nibble and high byte its
    high nibble (on a little-endian host, so the uint16's bytes are the codes in
    order), then :func:`_small_codes_into` takes ``minus`` off and converts.
    """
    rows, nbytes = raw.shape
    spread = np.empty((rows, nbytes), np.uint16)
    np.left_shift(raw, np.uint16(4), out=spread, dtype=np.uint16)
    spread |= raw
    spread &= np.uint16(0x0F0F)
    _small_codes_into(spread.view(np.uint8).reshape(rows, 2 * nbytes), dst, minus, 15)


def _as(table: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """``table`` (float32 small integers) in the output's dtype (float32, or int32),
    built once per table."""
    if dtype == np.float32:
        return table
    key = id(table)
    found = _INT_TABLES.get(key)
    if found is None or found[0] is not table:
        found = (table, np.ascontiguousarray(table.astype(np.int32)))
        _INT_TABLES[key] = found
    return found[1]


def triple_table(minus: float = 0.0) -> np.ndarray:
    """Every 12-bit value's four 3-bit codes (low bits first) less ``minus``, as float32
    ``[4096, 4]`` (64 KiB, built once per ``minus``): half of the 8 codes 3 bytes hold."""
    table = _TRIPLE_TABLES.get(minus)
    if table is None:
        half = np.arange(1 << 12, dtype=np.uint32)[:, None]
        codes = (half >> (np.arange(4, dtype=np.uint32) * 3)[None, :]) & np.uint32(7)
        table = np.ascontiguousarray(codes.astype(np.float32) - np.float32(minus))
        _TRIPLE_TABLES[minus] = table
    return table


def _by_triples(words: np.ndarray, out: np.ndarray, minus: _Minus, skip: int) -> None:
    """Dense 3-bit codes from byte ``skip`` of each row (a multiple of 3): every 3 bytes
    hold 8 codes, spread by integer passes into 8 bytes, then converted once (1.8x a
    lookup of each 12-bit half in :func:`triple_table`)."""
    raw = np.ascontiguousarray(words).view(np.uint8)
    rows, count = out.shape
    groups = -(-count // 8)
    nbytes = 3 * groups
    # The bytes once more, one byte longer, so group k is read as the little-endian
    # uint32 at byte 3k (its fourth byte, the next group's, is masked off below); zero
    # bytes past a row's end fill a last, partial group.
    buf = np.zeros(rows * nbytes + 1, np.uint8)
    have = max(0, min(nbytes, raw.shape[1] - skip))
    buf[:-1].reshape(rows, nbytes)[:, :have] = raw[:, skip : skip + have]
    at3 = np.ndarray((rows, groups), np.dtype("<u4"), buffer=buf, strides=(nbytes, 3))
    x = np.empty((rows, groups), np.dtype("<u8"))
    np.copyto(x, at3, casting="unsafe")
    x &= np.uint64(0xFFFFFF)
    # Halve the fields twice over: 24 bits -> two 12-bit halves 32 bits apart -> four
    # 6-bit parts 16 apart -> eight 3-bit codes, one per byte, in order.
    # Each halving ORs in a shifted copy and keeps the moved and the staying fields: the
    # copy lands only on bits that are zero (3 passes a halving instead of 4).
    part = np.empty_like(x)
    for by, keep in _TRIPLE_SPREAD:
        np.left_shift(x, np.uint64(by), out=part)
        x |= part
        x &= np.uint64(keep)
    whole = groups * 8 == count and out.flags.c_contiguous
    dst = out if whole else np.empty((rows, groups * 8), out.dtype)
    _small_codes_into(x.view(np.uint8).reshape(rows, groups * 8), dst, minus, 7)
    if dst is not out:
        out[...] = dst[:, :count]


#: The halvings of :func:`_by_triples`: (the upper fields' shift, mask of the fields after
#: it: the lower fields where they were, the upper ones moved up by the shift).
_TRIPLE_SPREAD = tuple(
    (by, low | (high << by))
    for high, low, by in (
        (0xFFF000, 0xFFF, 20),
        (0x00000FC000000FC0, 0x0000003F0000003F, 10),
        (0x0038003800380038, 0x0007000700070007, 5),
    )
)


def _small_codes_into(codes: np.ndarray, dst: np.ndarray, minus: _Minus, top: int) -> None:
    """Codes ``0..top`` one per byte (``codes``, uint8, overwritten) less ``minus`` into
    ``dst``: a whole-number ``minus`` for which every difference fits int8, or uint8
    zero points per group (:func:`unpack_less_zeros`), comes off in the bytes, so the
    one conversion writes the final values."""
    rest: float = 0.0
    if isinstance(minus, np.ndarray):
        # A broadcast over groups costs a call per group: on bytes 3x less than on
        # float32. Codes and zeros are 0..top <= 15: each difference fits int8.
        groups = codes.reshape(codes.shape[0], minus.shape[1], -1)
        np.subtract(groups, minus[:, :, None], out=groups)
        codes = codes.view(np.int8)
    elif minus == int(minus) and 0 < minus <= 128 and top - minus <= 127:
        codes -= np.uint8(minus)  # wraps below zero: read back as int8, exact
        codes = codes.view(np.int8)
    else:
        rest = minus
    np.copyto(dst, codes, casting="unsafe")
    if rest:
        dst -= dst.dtype.type(rest)  # small integers: exact


def unpack_less_zeros(words: np.ndarray, bits: int, out: np.ndarray, zeros: np.ndarray) -> None:
    """:func:`unpack_into` of dense codes from bit 0 of each row, each less its group's
    zero point: ``out[r, j] = code - zeros[r, j // (C / G)]`` for float32 ``out``
    ``[R, C]`` and zero points ``[R, G]`` (codes themselves: whole numbers ``0 ..
    2**bits - 1``, as decoders unpack them), for GPTQ-lineage decoders with a zero
    point per group (GPTQ, compressed-tensors asymmetric, AWQ GEMV).

    For 3 and 4 bits the zero points come off in the unpacked bytes, before the one
    conversion to float32 (a float32 pass less); other widths and layouts subtract them
    from the float32 codes. Both are exact: the same small integers.
    """
    rows, count = out.shape
    if out.size == 0:
        return
    groups = zeros.shape[1] if zeros.ndim == 2 else 0
    z = np.asarray(zeros)
    fits = (
        bits in (3, 4)
        and np.little_endian
        and out.dtype == np.float32
        and out.flags.c_contiguous
        and groups > 0
        and count % groups == 0
        and count % (8 if bits == 3 else 2) == 0
        and z.shape == (rows, groups)
        and bool(np.all((z >= 0) & (z < (1 << bits)) & (z == np.floor(z))))
    )
    if not fits:
        unpack_into(words, bits, out)
        codes = out.reshape(rows, groups, -1)
        codes -= z.astype(np.float32)[:, :, None]
        return
    small = np.ascontiguousarray(z.astype(np.uint8))
    if bits == 4:
        raw = np.ascontiguousarray(np.ascontiguousarray(words).view(np.uint8)[:, : count // 2])
        _nibbles(raw, out, small)
    else:
        _by_triples(words, out, small, 0)


def _by_units(
    w32: np.ndarray,
    bits: int,
    out: np.ndarray,
    minus: float,
    unit_codes: int,
    unit_words: int,
) -> None:
    """Any width from bit 0 of each row: one shift-and-mask pass per code position of a
    unit over every unit (a code that leaves its word continues at bit 0 of the next)."""
    rows, count = out.shape
    units = -(-count // unit_codes)
    need = units * unit_words
    if w32.shape[1] < need:  # a last, partial unit: zero words past the row's end
        w32 = np.concatenate([w32, np.zeros((rows, need - w32.shape[1]), np.uint32)], axis=1)
    u = w32[:, :need].reshape(rows, units, unit_words)
    whole = units * unit_codes == count and out.flags.c_contiguous
    dst = out if whole else np.empty((rows, units * unit_codes), out.dtype)
    fields = dst.reshape(rows, units, unit_codes)
    code = np.empty((rows, units), np.uint32)
    mask = np.uint32((1 << bits) - 1)
    for k in range(unit_codes):
        word, shift = divmod(bits * k, 32)
        np.right_shift(u[:, :, word], np.uint32(shift), out=code)
        if shift + bits > 32:
            code |= u[:, :, word + 1] << np.uint32(32 - shift)
        code &= mask
        fields[:, :, k] = code
    if minus:
        dst -= dst.dtype.type(minus)
    if dst is not out:
        out[...] = dst[:, :count]


def gather_codes(words: np.ndarray, bits: int, bit: np.ndarray) -> np.ndarray:
    """The ``bits``-wide code starting at stream bit ``bit[j]`` of each row of words
    ``[R, W]`` (packed LSB-first along the last axis; a code may continue into the next
    word), as float32 ``[R, len(bit)]``: codes picked by position, for boxes that
    start inside a unit (:func:`unpack_into` uses it there).
    """
    w32 = np.ascontiguousarray(words).view(np.uint32)
    w = np.concatenate([w32, np.zeros((w32.shape[0], 1), np.uint32)], axis=1).astype(np.uint64)
    word = bit // 32
    both = w[:, word] | (w[:, word + 1] << np.uint64(32))
    codes = (both >> (bit % 32).astype(np.uint64)) & np.uint64((1 << bits) - 1)
    return codes.astype(np.float32)


def transposed_words(words: np.ndarray, cols: slice) -> np.ndarray:
    """``words[:, cols].T`` as a new C-contiguous array.

    For decoders whose words are packed along the first axis (GPTQ's qweight
    ``[in * bits / 32, out]``, AWQ GEMM's): a band of output rows is a band of word
    columns, and its transpose puts each output row's bit stream in order. The
    columns are first copied out row by row (sequential runs), then transposed from
    that narrow copy: transposing straight from the wide array reads rows a
    power-of-two stride apart, which share cache sets (2.5-5x slower, measured on
    GPTQ 4- and 8-bit words).
    """
    narrow = np.ascontiguousarray(words[:, cols])
    return np.ascontiguousarray(narrow.T)


def unpack_slots_into(
    words: np.ndarray,
    bits: int,
    slots: Sequence[int],
    out: np.ndarray,
    zeros: np.ndarray | None = None,
) -> None:
    """Codes packed across output rows, ``k = len(slots)`` rows per word, into float32
    ``out`` ``[k * C, N]``: row ``k * c + j`` is slot ``slots[j]`` (bits ``bits *
    slots[j] ..``) of word row ``c`` of ``words`` ``[C, N]`` (any 32-bit integer dtype,
    read as unsigned), less its group's zero point when ``zeros`` (uint32 codes ``[k *
    C, G]``, one per output row and group of ``N / G`` columns) is given.

    The one unpacker of AutoAWQ's GEMM packing (AWQ GEMM's qweight and qzeros, AMD
    Quark's int4/uint4, whose words hold eight output columns in ``AWQ_ORDER``), on
    a band of :func:`transposed_words`. Eight 4-bit slots take :func:`_nibble_slots`
    (byte planes, then nibbles, zeros and the one conversion on bytes); other widths a
    shift, a mask (and the zeros off the integer codes: a wrapped uint32 difference
    read as int32 is exact) and a conversion straight into its rows per slot, all
    contiguous. The result is exact.
    """
    k = len(slots)
    w = np.ascontiguousarray(words).view(np.uint32)
    if out.shape != (k * w.shape[0], w.shape[1]) or not out.flags.c_contiguous:
        want = (k * w.shape[0], w.shape[1])
        raise ValueError(f"out must be C-contiguous {want}, not {out.shape}")
    groups = 0 if zeros is None else zeros.shape[1]
    if (
        bits * k == 32
        and bits == 4
        and np.little_endian
        and (groups == 0 or w.shape[1] % groups == 0)
    ):
        _nibble_slots(w, slots, out, zeros)
        return
    block = out.reshape(w.shape[0], k, w.shape[1])
    code = np.empty_like(w)
    mask = np.uint32((1 << bits) - 1)
    per_slot = None if zeros is None else zeros.reshape(w.shape[0], k, zeros.shape[1], 1)
    for j, slot in enumerate(slots):
        shift = bits * slot
        if shift == 0:
            np.bitwise_and(w, mask, out=code)
        else:
            np.right_shift(w, np.uint32(shift), out=code)
            if shift + bits < 32:
                code &= mask
        if per_slot is not None and code.size:
            groups = code.reshape(w.shape[0], per_slot.shape[2], -1)
            np.subtract(groups, per_slot[:, j], out=groups)
        block[:, j, :] = code.view(np.int32)


def _nibble_slots(
    w: np.ndarray, slots: Sequence[int], out: np.ndarray, zeros: np.ndarray | None
) -> None:
    """:func:`unpack_slots_into` of eight 4-bit slots per uint32 word ``w`` ``[C, N]``
    (zero points codes below 16, or none): 30% less time than a shift and a mask of
    each slot over whole words (AWQ GEMM, Quark int4).

    Each byte of the words becomes a contiguous plane (a shift and a narrowing copy),
    each slot a nibble of one plane (a byte-wide mask or shift), the zero points come
    off the bytes (a wrapped uint8 difference read as int8: codes and zeros are
    0..15), then one conversion writes every row.
    """
    c, n = w.shape
    planes = np.empty((4, c, n), np.uint8)
    shifted = np.empty_like(w)
    np.copyto(planes[0], w, casting="unsafe")
    for b in range(1, 4):
        np.right_shift(w, np.uint32(8 * b), out=shifted)
        np.copyto(planes[b], shifted, casting="unsafe")
    codes = np.empty((c, len(slots), n), np.uint8)
    for j, slot in enumerate(slots):
        byte = planes[slot // 2]
        if slot % 2:
            np.right_shift(byte, np.uint8(4), out=codes[:, j])
        else:
            np.bitwise_and(byte, np.uint8(15), out=codes[:, j])
    if zeros is not None and codes.size:
        groups = codes.reshape(c, len(slots), zeros.shape[1], -1)
        small = zeros.astype(np.uint8).reshape(c, len(slots), zeros.shape[1], 1)
        np.subtract(groups, small, out=groups)
    np.copyto(out.reshape(c, len(slots), n), codes.view(np.int8), casting="unsafe")


def decode_slot_groups(
    words: np.ndarray,
    bits: int,
    slots: Sequence[int],
    zero: np.ndarray,
    scale: np.ndarray,
    out: np.ndarray | None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """``(q - zero) * scale`` per group into float32 ``out`` ``[k * C, I]`` (made when
    None) from codes
    stored ``[I, C]`` packed across output rows (``k = len(slots)`` per word, as
    :func:`unpack_slots_into` reads them): AutoAWQ's GEMM packing (AWQ GEMM, AMD
    Quark's int4/uint4), its decoders' one banded path.

    ``zero`` and ``scale`` are float32 ``[k * C, G]``, one value per output row and
    group of ``I / G`` columns. Bands of word columns run on the worker threads, each
    transposed, unpacked and scaled while in cache; zero points that are codes come
    off the integer codes, others off the float32 ones. The same values as a
    whole-array ``(q - z) * s``, so the same bits. With ``rounded`` (C-contiguous uint16
    of ``out``'s shape: ``BoxSources.rounded_out``) each band goes through a buffer of
    its thread and is rounded into ``rounded`` while in cache (``out`` is not written),
    and ``rounded`` is returned.
    """
    k = len(slots)
    src = np.ascontiguousarray(words).view(np.uint32)
    cols, groups = src.shape[0], scale.shape[1]
    width = cols // groups if groups else 0
    codes = (zero >= 0) & (zero < (1 << bits)) & (zero == np.floor(zero))
    small = np.ascontiguousarray(zero.astype(np.uint32)) if bool(np.all(codes)) else None
    result = banded_output((k * src.shape[1], cols), out, rounded)

    def work(runs: Sequence[range]) -> None:
        for chunk in _word_chunks(runs, _CHUNK_WORDS):
            # Several bands' words transposed at once: longer runs read from each row of
            # the wide array (AWQ GEMM 4096x4096 has bands of 8 word columns, 32 bytes
            # a row: 1.7x the time per word of 32 columns at once, measured).
            first = chunk[0].start
            words_t = transposed_words(src, slice(first, chunk[-1].stop))
            for run in chunk:
                rows = slice(run.start * k, run.stop * k)
                band = words_t[run.start - first : run.stop - first]

                def fill(values: np.ndarray, rows: slice = rows, band: np.ndarray = band) -> None:
                    zeros = None if small is None else small[rows]
                    unpack_slots_into(band, bits, slots, values, zeros)
                    at = zero if small is None else None
                    _scale_groups(values, rows, at, scale, groups, width)

                fill_band(fill, result[rows])

    run_in_row_bands(work, src.shape[1], k * cols)
    return result


#: Word columns :func:`decode_slot_groups` transposes at once (at most, unless one band is wider).
_CHUNK_WORDS = 32


def _word_chunks(runs: Sequence[range], words: int) -> list[list[range]]:
    """Consecutive ``runs`` grouped into chunks spanning about ``words`` columns (a run
    longer than that alone), each chunk one contiguous span."""
    chunks: list[list[range]] = []
    for run in runs:
        last = chunks[-1] if chunks else None
        if last and last[-1].stop == run.start and run.stop - last[0].start <= words:
            last.append(run)
        else:
            chunks.append([run])
    return chunks


def _scale_groups(
    values: np.ndarray,
    rows: slice,
    zero: np.ndarray | None,
    scale: np.ndarray,
    groups: int,
    width: int,
) -> None:
    """``(values - zero) * scale`` in place, per group of ``width`` columns, for the
    output ``rows`` of a band (``zero`` None: already off the codes)."""
    # inf * 0 is NaN by definition: the format reports non-finite scales.
    with np.errstate(invalid="ignore", over="ignore"):
        v3 = values.reshape(-1, groups, width)
        if zero is not None:
            v3 -= zero[rows, :, None]
        v3 *= scale[rows, :, None]


def pack_words(
    codes: np.ndarray, bits: int, *, axis: int, per_word: int | None = None
) -> np.ndarray:
    """Unsigned codes of a 2-D array (each below ``2**bits``) packed LSB-first into int32
    words along ``axis``: the encoders' inverse of :func:`unpack_into`.

    :param per_word: None for one dense bit stream (code ``j`` at bit ``bits * j``,
        crossing word boundaries where ``bits`` does not divide 32: GPTQ,
        compressed-tensors >= 0.18), or ``k`` codes per word with the top bits of
        each word unused (compressed-tensors 0.17's odd widths).
    :return: ``ceil(n * bits / 32)`` (dense) or ``ceil(n / k)`` words for ``n`` codes
        along ``axis``, the other axis unchanged.
    """
    c = np.moveaxis(np.asarray(codes), axis, 0)
    n, m = c.shape
    if per_word is None:
        unit_codes, unit_words = 32 // gcd(32, bits), bits // gcd(32, bits)
        width = -(-n * bits // 32)
    else:
        unit_codes, unit_words = per_word, 1
        width = -(-n // per_word)
    # Whole units (the smallest run of whole words holding whole codes), zero-padded,
    # so each code position of a unit is one vectorized pass over every unit.
    units = -(-n // unit_codes)
    if n % unit_codes:
        c = np.concatenate([c, np.zeros((units * unit_codes - n, m), c.dtype)])
    u = c.reshape(units, unit_codes, m)
    out = np.zeros((units, unit_words, m), np.uint64)
    for k in range(unit_codes):
        word, shift = divmod(bits * k, 32)
        value = u[:, k].astype(np.uint64) << np.uint64(shift)
        out[:, word] |= value & np.uint64(0xFFFFFFFF)
        if shift + bits > 32:  # the code continues at bit 0 of the next word
            out[:, word + 1] |= value >> np.uint64(32)
    flat = out.reshape(units * unit_words, m)[:width].astype(np.uint32).view(np.int32)
    return np.ascontiguousarray(np.moveaxis(flat, 0, axis))
