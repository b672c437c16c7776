"""The MXFP4 dequantization math, written once for numpy and Paddle arrays.

``value = E2M1(code) * 2^(scale - 127)`` in float32, exactly: every E2M1 value
and every E8M0 scale is a float32, and their product is rounded once by the
float32 multiply (it is exact except where it overflows to infinity, for
scales above 2^125, or for values below 2^-149, which cannot occur). Scale
0xFF is NaN, so its whole block is NaN; scale 0x00 is 2^-127, a float32
subnormal, kept as is. :func:`decode` is the format's decode (``flexq_apply``)
(including the transpose of gpt-oss experts to [E, in, out]);
:func:`dequantize` decodes rows of blocks in storage orientation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.formatkit import (
    E2M1_PAIRS,
    E8M0_TO_FLOAT32,
    RUNS_PER_TASK,
    fill_band,
    is_paddle,
    lookup_blocks,
    ops_for,
    row_bands,
    run_on_threads,
)
from flexq_mxfp4.config import FORMAT_NAME
from flexq_mxfp4.layout import BLOCK

if TYPE_CHECKING:
    from flexq.formatkit import BoxSources
    from flexq_mxfp4.layout import MxTensor


def decode(tensor: MxTensor, sources: BoxSources, out: Any) -> Any:
    """The format's ``decode``: the float32 box ``sources.target`` of ``tensor``.

    :raises FormatError: when the scales are not the box the target needs.
    """
    offset = tensor.to_stored(sources.target.global_offset)
    shape = tensor.to_stored(sources.target.local_shape)
    want = (*shape[:-1], tensor.covering_blocks(offset[-1], shape[-1])[1])
    sources.expect({tensor.scale_key: want}, logical_key=tensor.key, format_name=FORMAT_NAME)
    packed, scales = sources[tensor.packed_key], sources[tensor.scale_key]
    if tensor.layout == "gpt-oss":
        # [..., g, 16] -> [..., g*16]: the blocks of one row are contiguous bytes.
        lead = tuple(packed.shape)
        packed = packed.reshape([*lead[:-2], lead[-2] * lead[-1]])
    trim = offset[-1] % BLOCK
    if not tensor.transposed:
        return dequantize(packed, scales, trim, shape[-1], out, sources.rounded_out)
    if _whole_numpy_run(packed, scales, trim, shape[-1]) and (
        out is None or out.flags.c_contiguous
    ):
        return _whole_blocks_transposed(packed, scales, out, sources.rounded_out)
    values = dequantize(packed, scales, trim, shape[-1])
    swapped = values.transpose([*range(values.ndim - 2), values.ndim - 1, values.ndim - 2])
    if is_paddle(swapped):
        return swapped
    if out is None:
        return np.ascontiguousarray(swapped)
    np.copyto(out, swapped)
    return out


def dequantize(
    packed: Any,
    scales: Any,
    trim: int,
    size: int,
    out: Any = None,
    rounded: np.ndarray | None = None,
) -> Any:
    """Decode a run of whole blocks along the last axis and cut out ``size`` elements.

    :param packed: codes as bytes, ``[..., nbytes]``; the run starts on a block
        boundary and holds whole blocks except possibly a partial last one.
    :param scales: E8M0 bytes, ``[..., ceil(2*nbytes / 32)]``.
    :param trim: elements of the first block to drop (the target's offset in it).
    :param size: elements to keep.
    :param out: None, or a C-contiguous numpy float32 array ``[..., size]`` to
        fill (used when the run is exactly whole blocks).
    :param rounded: None, or a C-contiguous uint16 array ``[..., size]`` (a bfloat16
        target's memory, ``BoxSources.rounded_out``): when the run is exactly whole
        blocks, the bfloat16 bits go there, each band rounded while in cache.
    :return: float32 ``[..., size]``, numpy or Paddle like the inputs, or ``rounded``.
    """
    ops = ops_for(packed)
    lead = tuple(packed.shape[:-1])
    n = 2 * int(packed.shape[-1])
    nblk = int(scales.shape[-1])
    if _whole_numpy_run(packed, scales, trim, size):
        return _whole_blocks(packed, scales, out, rounded)
    values = ops.lut_pairs(E2M1_PAIRS, packed)
    scale = ops.lut(E8M0_TO_FLOAT32, scales)
    if n == nblk * BLOCK:
        # Broadcast one scale over its block: no repeated scale array is built.
        blocks = ops.reshape(values, (*lead, nblk, BLOCK))
        blocks = ops.mul_into(blocks, ops.reshape(scale, (*lead, nblk, 1)))
        values = ops.reshape(blocks, (*lead, n))
    else:
        # A partial last block (compressed-tensors rows not a multiple of 32).
        values = ops.mul_into(values, ops.repeat(scale, BLOCK, axis=-1)[..., :n])
    if trim == 0 and size == n:
        return values
    return values[..., trim : trim + size]


def _whole_numpy_run(packed: Any, scales: Any, trim: int, size: int) -> bool:
    """Whether the numpy fast path applies: C-contiguous codes, exactly whole blocks, no trim."""
    n = 2 * int(packed.shape[-1])
    return (
        isinstance(packed, np.ndarray)
        and packed.flags.c_contiguous
        and n == int(scales.shape[-1]) * BLOCK
        and trim == 0
        and size == n
    )


#: E2M1_PAIRS rows as one 8-byte item each: a byte's two float32 values in one copy.
_PAIR_ITEMS = np.ascontiguousarray(E2M1_PAIRS).view(np.uint64).reshape(256)


def _decode_band(codes: np.ndarray, pairs: np.ndarray, scale: np.ndarray) -> None:
    """Decode codes [..., blocks, 16] into ``pairs`` (8-byte items, the same shape) and
    multiply by ``scale`` [..., blocks, 1], while the band is still in cache."""
    # ``take`` with ``clip`` skips bounds checks: a byte cannot exceed 255.
    np.take(_PAIR_ITEMS, codes, out=pairs, mode="clip")
    values = pairs.view(np.float32)
    # Products above float32's range are infinity by definition: no warning.
    with np.errstate(over="ignore", invalid="ignore"):
        values *= scale


def _whole_blocks(
    packed: np.ndarray,
    scales: np.ndarray,
    out: np.ndarray | None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """The numpy path for runs of whole blocks: band by band on the worker threads.

    Codes are viewed as ``[..., blocks, 16]`` and the result as 8-byte pairs of
    the same shape, so each block's scale lines up with its 16 bytes (with ``rounded``,
    its bfloat16 bits as 4-byte pairs, each band rounded while in cache).
    """
    lead, nblk = tuple(packed.shape[:-1]), int(scales.shape[-1])
    codes = packed.reshape((*lead, nblk, BLOCK // 2))
    scale = E8M0_TO_FLOAT32[np.asarray(scales)].reshape((*lead, nblk, 1))
    return lookup_blocks(_PAIR_ITEMS, codes, scale, out, rounded)


def _whole_blocks_transposed(
    packed: np.ndarray,
    scales: np.ndarray,
    out: np.ndarray | None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`_whole_blocks` for gpt-oss experts: codes [..., rows, n/2] decode to
    [..., n, rows] (logical [E, in, out]), bands on the worker threads.

    An even number of rows takes :func:`_row_pair_band` (the codes are transposed, as
    bytes, not the float32 results), rounded band by band into ``rounded`` when given (a
    bfloat16 target's memory, ``BoxSources.rounded_out``), which is then returned;
    otherwise each band of rows is decoded into a small scratch array while in cache and
    written transposed into its columns, in float32.
    """
    *lead, rows, nbytes = (int(d) for d in packed.shape)
    nblk, n, mats = int(scales.shape[-1]), 2 * nbytes, math.prod(lead)
    codes = packed.reshape((mats, rows, nbytes))
    scale = np.asarray(scales).reshape((mats, rows, nblk))
    paired = rows % 2 == 0 and rows * nblk > 0
    if paired and rounded is not None and rounded.flags.c_contiguous:
        result = rounded  # the bfloat16 target's bits: each band rounded into them
    else:
        result = np.empty((*lead, n, rows), np.float32) if out is None else out
    flat = result.reshape((mats, n, rows))
    if paired:
        # Bands of whole blocks (16 code bytes: 32 result rows) of about a band's size,
        # their nibbles paired a chunk of bands at a time (longer runs per row).
        per = max(1, row_bands(nblk, 32 * rows)[0].stop) * (BLOCK // 2)
        wide = per * RUNS_PER_TASK
        chunks = [
            (m, range(j, min(j + wide, nbytes)))
            for m in range(mats)
            for j in range(0, nbytes, wide)
        ]
        run_on_threads(lambda part: _row_pair_chunks(codes, scale, flat, part, per), chunks, 1)
        return result

    blocks = codes.reshape((mats, rows, nblk, BLOCK // 2))
    bands = [(m, run) for m in range(mats) for run in row_bands(rows, n)]

    def work(part: Sequence[tuple[int, range]]) -> None:
        for m, run in part:
            rs = slice(run.start, run.stop)
            scratch = np.empty((len(run), nblk, BLOCK), np.float32)
            scale_band = E8M0_TO_FLOAT32[scale[m, rs]].reshape((len(run), nblk, 1))
            _decode_band(blocks[m, rs], scratch.view(np.uint64), scale_band)
            flat[m, :, rs] = scratch.reshape((len(run), n)).T

    run_on_threads(work, bands, RUNS_PER_TASK)
    return result


def _row_pair_chunks(
    codes: np.ndarray,
    scale: np.ndarray,
    flat: np.ndarray,
    part: Sequence[tuple[int, range]],
    per: int,
) -> None:
    """For each (matrix, run of code bytes) of ``part``: its nibbles paired at once
    (:func:`_paired_nibbles`), then :func:`_row_pair_band` of every ``per`` bytes."""
    for m, run in part:
        pairs = _paired_nibbles(codes[m, :, run.start : run.stop])
        for at in range(0, len(run), per):
            band = range(run.start + at, min(run.start + at + per, run.stop))
            _row_pair_band(pairs[:, :, at : at + per], scale[m], flat[m], band)


def _paired_nibbles(codes: np.ndarray) -> np.ndarray:
    """Codes [rows, w] (rows even, w a multiple of 8) -> [2, rows / 2, w] bytes: [0, k, j]
    holds the low nibbles of byte j of rows 2k (low) and 2k+1 (high), [1, k, j] their
    high nibbles. Computed 8 bytes a uint64 lane (1.8x faster than uint8 lanes on a
    gpt-oss matrix, measured)."""
    rows, width = codes.shape
    even, odd = codes[0::2].view(np.uint64), codes[1::2].view(np.uint64)
    pairs = np.empty((2, rows // 2, width), np.uint8)
    low, high = pairs[0].view(np.uint64), pairs[1].view(np.uint64)
    part = np.empty_like(low)
    np.left_shift(odd, np.uint64(4), out=part)  # each byte's low nibble moved up
    part &= _HIGH_NIBBLES
    np.bitwise_and(even, _LOW_NIBBLES, out=low)
    low |= part
    np.right_shift(even, np.uint64(4), out=high)
    high &= _LOW_NIBBLES
    np.bitwise_and(odd, _HIGH_NIBBLES, out=part)
    high |= part
    return pairs


#: The low and the high nibble of each byte of a uint64 lane.
_LOW_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
_HIGH_NIBBLES = np.uint64(0xF0F0F0F0F0F0F0F0)


def _row_pair_band(pairs: np.ndarray, scale: np.ndarray, flat: np.ndarray, run: range) -> None:
    """Result rows ``2j, 2j + 1`` for the code bytes ``j`` of ``run`` (whole blocks) of one
    matrix, from their :func:`_paired_nibbles` ``pairs`` [2, rows / 2, len(run)], E8M0
    ``scale`` [rows, n/32], into ``flat`` [n, rows]: a quarter less CPU time than
    decoding stored rows and transposing the float32 results.

    Byte [0, k, j] of ``pairs`` looks up result row 2j, columns 2k and 2k+1 ([1, k, j]:
    row 2j + 1): the pairs, transposed as bytes, look up into contiguous result rows,
    and each block's 32 rows are multiplied by their scales, a row of them over the
    stored rows. A uint16 ``flat`` (a bfloat16 target's bits) gets the band rounded
    while in cache (:func:`flexq.formatkit.fill_band`).
    """
    rows = 2 * pairs.shape[1]
    by_row = np.ascontiguousarray(pairs.transpose(2, 0, 1))  # [bytes, 2, rows / 2]
    first = run.start // (BLOCK // 2)

    def fill(values: np.ndarray) -> None:
        items = values.view(np.uint64).reshape(by_row.shape)
        np.take(_PAIR_ITEMS, by_row, out=items, mode="clip")
        blocks = values.reshape(-1, BLOCK, rows)
        side = E8M0_TO_FLOAT32[scale[:, first : first + blocks.shape[0]].T]
        # Products above float32's range are infinity by definition: no warning.
        with np.errstate(over="ignore", invalid="ignore"):
            blocks *= side[:, None, :]

    fill_band(fill, flat[2 * run.start : 2 * run.stop])
