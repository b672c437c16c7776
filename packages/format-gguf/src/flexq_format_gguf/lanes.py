"""Bit fields of a band of ggml blocks, every byte at once, for the decoders.

For :mod:`flexq_format_gguf.decode`. A field plane is one bit field (nibble, 2-bit
crumb, single bit) of every byte of a band's raw blocks, scales and all: shifts and
masks run on uint64 lanes over the band's bytes as one flat array (numpy shifts uint8 a
byte at a time, and a strided op over a block's fields pays a loop per block; the few
bytes decoded needlessly cost less). The decoders then read each quant's field through
a view of the planes at its byte's place in the block, so that the one interleaving
copy into float32 puts every field in element order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

_W = np.uint64
_U8 = np.uint8
#: 0x01 in every byte of a uint64 lane (times a byte mask: that mask in every byte).
_EVERY_BYTE = 0x0101010101010101
#: A field: (right shift, byte mask); a negative shift shifts left.
Field = tuple[int, int]
NIBBLES: tuple[Field, ...] = ((0, 0x0F), (4, 0x0F))
CRUMBS: tuple[Field, ...] = ((0, 0x03), (2, 0x03), (4, 0x03), (6, 0x03))

_local = threading.local()


def scratch(name: str, lanes: int) -> np.ndarray:
    """This thread's reused uint64 buffer ``name`` of at least ``lanes`` lanes, its first
    ``lanes`` (fresh arrays of a band's size were mapped afresh by every call: their page
    faults cost several times the work)."""
    buf: np.ndarray | None = getattr(_local, name, None)
    if buf is None or buf.size < lanes:
        buf = np.empty(lanes, _W)
        setattr(_local, name, buf)
    return buf[:lanes]


def rows(x: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``x`` (``[n, k]`` bytes, each row contiguous, rows strided)
    made as n items of k bytes: one strided loop (``np.ascontiguousarray`` pays a loop
    per row, ~2x the time for a band's short rows)."""
    copied: np.ndarray = np.ascontiguousarray(x.view(f"V{x.shape[1]}")).view(_U8)
    return copied


def _lanes(raw: np.ndarray) -> np.ndarray:
    """A band's bytes ``[n, nbytes]`` as flat uint64 lanes: a view when whole lanes and
    aligned, else a zero-padded copy (a short band's tail, an odd start)."""
    flat = raw.reshape(-1)
    if flat.size % 8 == 0 and flat.ctypes.data % 8 == 0:
        return flat.view(_W)
    lanes = scratch("padded", -(-flat.size // 8))
    lanes[-1] = 0
    lanes.view(_U8)[: flat.size] = flat
    return lanes


def field_planes(raw: np.ndarray, fields: Sequence[Field], name: str = "planes") -> np.ndarray:
    """``[len(fields), n, nbytes]`` bytes: plane i holds field i of every byte of ``raw``
    (``[n, nbytes]`` uint8, C-contiguous) in place, shifted and masked, in this thread's
    buffer ``name`` (valid until its next call with ``name``). A field's mask keeps only
    its own byte's bits: below ``1 << (8 - shift)`` for a right shift, none below bit
    ``-shift`` for a left one."""
    lanes = _lanes(raw)
    planes = scratch(name, len(fields) * lanes.size).reshape(len(fields), lanes.size)
    for plane, (shift, mask) in zip(planes, fields, strict=True):
        if shift > 0:
            np.right_shift(lanes, _W(shift), out=plane)
        elif shift < 0:
            np.left_shift(lanes, _W(-shift), out=plane)
        else:
            np.bitwise_and(lanes, _W(_EVERY_BYTE * mask), out=plane)
            continue
        plane &= _W(_EVERY_BYTE * mask)
    n, nbytes = raw.shape
    return planes.view(_U8)[:, : n * nbytes].reshape(len(fields), n, nbytes)


def or_into(
    planes: np.ndarray, place: Callable[[np.ndarray], np.ndarray], bits: np.ndarray
) -> None:
    """``place(planes) |= bits``, for ``bits`` laid out otherwise than that view of the
    planes (an OR of two differently strided views goes through numpy's buffered loop, at
    ~3x a copy's cost): ``bits`` are copied to their place in a scratch shaped as the
    planes, then OR-ed over the whole planes (bytes no quant is read from take garbage)."""
    lanes = -(-planes.size // 8)
    placed = scratch("placed", lanes).view(_U8)[: planes.size].reshape(planes.shape)
    np.copyto(place(placed), bits)
    np.bitwise_or(planes, placed, out=planes)
