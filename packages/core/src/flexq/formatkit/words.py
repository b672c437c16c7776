"""Packed integer words: small codes stored LSB-first in int32 words, unpacked on the CPU.

For formats that pack 1, 2, 4 or 8-bit codes into little-endian words, element
``j`` of a row at bits ``bits*j ..`` of its bit stream (GPTQ's qweight and
qzeros, compressed-tensors ``pack-quantized``). Read as bytes, such a row is
its codes in order, byte by byte, so one table lookup per byte unpacks it:
:func:`code_table` is that table and :func:`unpack_into` the lookup, with
several codes copied per lookup as one wide item (no arithmetic, so the result
is exact). Other orders (AWQ's) and devices use
:meth:`ArrayOps.unpack <flexq.formatkit.ArrayOps.unpack>`.
"""

from __future__ import annotations

from math import gcd

import numpy as np

from flexq.numerics.bands import lookup_into

#: Codes per byte -> a numpy item as wide as that many float32 (one gather copies them all).
_ITEMS: dict[int, type[np.generic]] = {2: np.uint64, 4: np.complex128}
_TABLES: dict[tuple[int, float], np.ndarray] = {}


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
    each less ``minus``.

    Each byte's codes come from one lookup: two (4 bits) or four (2 bits) float32
    as one wide item, byte pairs through the pair table for 8 bits.
    """
    if not np.little_endian:
        words = words.astype(words.dtype.newbyteorder("<"))
    raw = np.ascontiguousarray(words).view(np.uint8)
    table = code_table(bits, minus)
    per = 8 // bits
    if per == 1:
        lookup_into(table.reshape(256), raw, out)
    elif per in _ITEMS:
        item = _ITEMS[per]
        np.take(
            table.view(item).reshape(256), raw, out=out.view(item).reshape(raw.shape), mode="clip"
        )
    else:
        np.take(table, raw, axis=0, out=out.reshape(*raw.shape, per), mode="clip")


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
