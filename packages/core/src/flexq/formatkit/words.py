"""Packed integer words: small codes stored LSB-first in int32 words, unpacked on the CPU.

For formats that pack 1, 2, 3, 4 or 8-bit codes into little-endian words, element
``j`` of a row at bits ``bits*j ..`` of its bit stream (GPTQ's qweight and
qzeros, compressed-tensors ``pack-quantized``). Read as bytes, such a row is
its codes in order, byte by byte, so one table lookup per byte unpacks it:
:func:`code_table` is that table and :func:`unpack_into` the lookup, with
several codes copied per lookup as one wide item (no arithmetic, so the result
is exact). 3-bit codes do not fit whole in a byte; every 3 bytes hold 8 of them,
and each 12-bit half of those 3 bytes is looked up in a 4096-entry table of 4
codes. 8-bit codes need no table: a byte converts to float32 exactly. Other
orders (AWQ's) and devices use
:meth:`ArrayOps.unpack <flexq.formatkit.ArrayOps.unpack>`.
"""

from __future__ import annotations

from math import gcd
from typing import Any

import numpy as np

#: Codes per byte -> a numpy item as wide as that many float32 (one gather copies them all).
_ITEMS: dict[int, type[np.generic]] = {2: np.uint64, 4: np.complex128}
_TABLES: dict[tuple[int, float], np.ndarray] = {}
_TRIPLE_TABLES: dict[float, np.ndarray] = {}
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


def unpack_into(words: np.ndarray, bits: int, out: np.ndarray, minus: float = 0.0) -> None:
    """The codes of C-contiguous words ``[R, W]`` (any integer dtype, packed along the
    last axis) into C-contiguous float32 ``out`` ``[R, W * itemsize * 8 / bits]``,
    each less ``minus`` (or into int32 ``out``: the codes as indexes, for decoders
    that look each code up again, e.g. per group).

    Each byte's codes come from one lookup: two (4 bits) or four (2 bits) float32
    as one wide item; 8-bit bytes convert to float32 directly; 3-bit rows (whole
    groups of 3 bytes) through :func:`triple_table`, four codes per lookup.
    """
    if not np.little_endian:
        words = words.astype(words.dtype.newbyteorder("<"))
    if out.dtype not in (np.float32, np.int32):
        raise ValueError(f"codes unpack into float32 or int32, not {out.dtype}")
    raw = np.ascontiguousarray(words).view(np.uint8)
    if bits == 3:
        _unpack_triples(raw, out, minus)
        return
    if bits == 8:
        # A conversion, not a gather: several times faster than the pair table.
        np.copyto(out, raw.reshape(out.shape), casting="unsafe")
        if minus:
            out -= out.dtype.type(minus)  # small integers: exact
        return
    table = _as(code_table(bits, minus), out.dtype)
    per = 8 // bits
    if per in _ITEMS:
        item = _ITEMS[per]
        np.take(
            table.view(item).reshape(256), raw, out=out.view(item).reshape(raw.shape), mode="clip"
        )
    else:
        np.take(table, raw, axis=0, out=out.reshape(*raw.shape, per), mode="clip")


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


def _unpack_triples(raw: np.ndarray, out: np.ndarray, minus: float) -> None:
    """3-bit codes of byte rows ``raw`` ``[R, 3n]`` into float32 ``out`` ``[R, 8n]``."""
    rows, nbytes = raw.shape[0], raw.shape[-1]
    if nbytes % 3:
        raise ValueError(f"3-bit rows must be whole groups of 3 bytes, not {nbytes} bytes")
    b = raw.reshape(rows, nbytes // 3, 3)
    # Bytes b0 b1 b2 hold codes 0-3 in b0 + the low nibble of b1, codes 4-7 in the
    # high nibble of b1 + b2: two 12-bit table indexes per 3 bytes.
    index = np.empty((rows, nbytes // 3, 2), np.uint16)
    low, high = index[..., 0], index[..., 1]
    np.copyto(low, b[..., 1])
    low &= 0xF
    low <<= 8
    low |= b[..., 0]
    np.copyto(high, b[..., 2])
    high <<= 4
    high |= b[..., 1] >> 4
    items = _as(triple_table(minus), out.dtype).view(np.complex128).reshape(1 << 12)
    np.take(items, index, out=out.view(np.complex128).reshape(index.shape), mode="clip")


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
