"""The bitsandbytes dequantization math, written once for numpy and Paddle arrays.

Exactly bitsandbytes 0.50.2's float32 operations, in its order:

- 4-bit: ``W[i] = book[code_i] * absmax[i // blocksize]`` over the flattened
  tensor (one float32 product; bnb's kernels then round to the quant state's
  dtype, which the core does here, once).
- double quantization first rebuilds the absmax values as bnb's
  ``dequantize_blockwise`` + ``absmax += offset`` do:
  ``absmax[j] = nested_quant_map[q_j] * nested_absmax[j // nested_blocksize]``
  (float32 product) ``+ float32(nested_offset)`` (float32 sum).
- LLM.int8: ``W = (float32(CB) * SCB[row]) * float32(7.874015718698502e-3)``,
  bnb's ``int8_vectorwise_dequant`` (``A * stats.view(-1, 1) * (1/127)``: two
  float32 products, the reciprocal rounded to float32; not ``/ 127``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.formatkit import (
    ArrayOps,
    is_paddle,
    lookup_blocks,
    nibble_pairs,
    ops_for,
    pair_items,
    run_in_bands,
    to_numpy,
)
from flexq_bitsandbytes.codebook import CODE_BOOKS
from flexq_bitsandbytes.config import FORMAT
from flexq_bitsandbytes.layout import INV_127, FourBit, Int8
from flexq_bitsandbytes.plan import block_elements, covering_blocks, flat_range, four_bit_boxes

if TYPE_CHECKING:
    from flexq import TargetSlice
    from flexq.formatkit import BoxSources

#: quant type -> byte -> its two decoded codes (element 2k in the HIGH nibble).
PAIR_TABLES = {name: nibble_pairs(book, high_first=True) for name, book in CODE_BOOKS.items()}
#: The same pairs as one 8-byte item each, for the banded numpy path.
_PAIR_ITEMS = {name: pair_items(t) for name, t in PAIR_TABLES.items()}


def _const(like: Any, value: float) -> Any:
    """``value`` as a float32 scalar next to ``like``: constants are multiplied and added
    as float32 tensors (Paddle's scalar ``scale`` op would add a +0.0 bias, turning -0.0
    into +0.0)."""
    if is_paddle(like):
        import paddle

        return paddle.to_tensor(np.float32(value), place=like.place)
    return np.float32(value)


def _pairs(ops: ArrayOps, quant_type: str, packed: Any) -> Any:
    """The decoded codes of packed bytes (any shape), flat: two per byte."""
    return ops.reshape(ops.lut_pairs(PAIR_TABLES[quant_type], packed), (-1,))


def decode(t: FourBit | Int8, sources: BoxSources, out: Any) -> Any:
    """The format's ``decode``, after checking what arrived: each source's shape against
    the target.

    NaN and infinite scales, the stored code book and the ``weight_format`` of an int8
    weight were checked by the core before any write (the plan declares them in
    ``ReadPlan.scales`` and ``ReadPlan.checks``; :func:`flexq_bitsandbytes.plan.check`).
    """
    if isinstance(t, Int8):
        return _int8(t, sources, out)
    return _four_bit(t, sources, out)


def _four_bit(t: FourBit, sources: BoxSources, out: Any) -> Any:
    target = sources.target
    boxes = {key: shape for key, (_, shape) in four_bit_boxes(t, target).items()}  # blob too
    sources.expect(boxes, logical_key=t.key, format_name=FORMAT)
    first, _ = covering_blocks(t, target)
    nested = t.nested
    scale = absmax_values(
        t,
        sources[t.absmax_key],
        sources[nested.absmax_key] if nested is not None else None,
        sources[nested.quant_map_key] if nested is not None else None,
        first,
    )
    return dequantize_four_bit(t, sources[t.key], scale, target, out, sources.rounded_out)


def _int8(t: Int8, sources: BoxSources, out: Any) -> Any:
    box = sources.target.local_shape
    sources.expect({t.key: box, t.scb_key: box[:1]}, logical_key=t.key, format_name=FORMAT)
    return dequantize_int8(sources[t.key], sources[t.scb_key], out)


def absmax_values(t: FourBit, absmax: Any, nested_absmax: Any, nested_map: Any, first: int) -> Any:
    """The float32 absmax of blocks ``[first, first + len(absmax))``.

    :param absmax: F32 values, or with double quantization U8 codes.
    :param nested_absmax: with double quantization, the entries of the groups
        those blocks fall in (from ``first // nested_blocksize``); else None.
    :param nested_map: with double quantization, the 256-entry nested code book.
    """
    ops = ops_for(absmax)
    if t.nested is None:
        return ops.float32(absmax, "F32")
    size = t.nested.blocksize
    count = int(absmax.shape[0])
    lead = first - (first // size) * size
    group = ops.repeat(ops.float32(nested_absmax, "F32"), size, axis=0)[lead : lead + count]
    table = to_numpy(nested_map).astype(np.float32)
    values = ops.lut(table, absmax) * group
    return values + _const(values, t.nested.offset)


def dequantize_four_bit(
    t: FourBit,
    packed: Any,
    scale: Any,
    target: TargetSlice,
    out: Any = None,
    rounded: np.ndarray | None = None,
) -> Any:
    """Decode the ``target`` box of ``t``.

    :param packed: the codes box :func:`flexq_bitsandbytes.plan.four_bit_boxes`
        names for ``target`` (the covering blocks' bytes, ``[k, 1]``).
    :param scale: float32 absmax of those blocks (:func:`absmax_values`).
    :param out: None, or a C-contiguous numpy float32 array of the target's shape.
    :param rounded: None, or a C-contiguous uint16 array of the target's shape (a
        bfloat16 target's memory, ``BoxSources.rounded_out``) that takes the bfloat16
        bits instead where ``out`` would be filled directly.
    :return: float32 of ``target.local_shape``, numpy or Paddle like ``packed``, or
        ``rounded``'s bits.
    """
    ops = ops_for(packed)
    if 0 in target.local_shape:
        return ops.reshape(_pairs(ops, t.quant_type, packed)[:0], target.local_shape)
    first, end = covering_blocks(t, target)
    e0, e1 = block_elements(t, first, end)
    lo, hi = flat_range(t, target)
    count, blocks, bs = e1 - e0, end - first, t.blocksize
    rows_shape = (target.local_shape[0], *t.shape[1:])
    whole_rows = tuple(target.local_shape[1:]) == tuple(t.shape[1:])
    if isinstance(packed, np.ndarray) and bs % 2 == 0 and count == blocks * bs and count:
        direct = whole_rows and lo == e0 and hi == e1
        into = out if direct and rounded is None else None
        flat = _banded(t.quant_type, packed, scale, blocks, bs, into, rounded if direct else None)
    else:
        flat = _general(ops, t.quant_type, packed, scale, e0, count, blocks, bs)
    values = ops.reshape(flat[lo - e0 : hi - e0], rows_shape)
    if whole_rows:
        return values
    box = tuple(
        slice(o, o + n)
        for o, n in zip(target.global_offset[1:], target.local_shape[1:], strict=True)
    )
    return values[(slice(None), *box)]


def _general(
    ops: ArrayOps,
    quant_type: str,
    packed: Any,
    scale: Any,
    e0: int,
    count: int,
    blocks: int,
    bs: int,
) -> Any:
    """Any blocksize, partial last block, numpy or Paddle: pairs, trim, broadcast multiply."""
    skip = e0 % 2  # an odd blocksize can start a block in the low nibble
    values = _pairs(ops, quant_type, packed)[skip : skip + count]
    if count == blocks * bs:
        blocked = ops.reshape(values, (blocks, bs)) * ops.reshape(scale, (blocks, 1))
        return ops.reshape(blocked, (count,))
    return values * ops.repeat(scale, bs, axis=0)[:count]


def _banded(
    quant_type: str,
    packed: np.ndarray,
    scale: np.ndarray,
    blocks: int,
    bs: int,
    out: np.ndarray | None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """Whole blocks of an even blocksize on the numpy worker threads, band by band.

    Codes are viewed as ``[blocks, bs/2]`` bytes and the result as 8-byte pairs of
    the same shape, so each block's absmax lines up with its bytes; a band is
    looked up and scaled while it is still in cache (with ``rounded``, C-contiguous
    uint16, rounded into it as 4-byte pairs of bfloat16 bits, which are returned flat).
    """
    codes = np.ascontiguousarray(packed).reshape(blocks, bs // 2)
    side = np.ascontiguousarray(scale, dtype=np.float32).reshape(blocks, 1)
    return lookup_blocks(_PAIR_ITEMS[quant_type], codes, side, out, rounded).reshape(-1)


def dequantize_int8(codes: Any, scb: Any, out: Any = None) -> Any:
    """``(float32(CB) * SCB[:, None]) * float32(1/127)`` for a box of rows (numpy or Paddle).

    :param out: None, or a C-contiguous numpy float32 array of the box's shape.
    """
    ops = ops_for(codes)
    scale = ops.reshape(ops.float32(scb, "F32"), (-1, 1))
    if not isinstance(codes, np.ndarray):
        rows = ops.float32(codes, "I8") * scale
        return rows * _const(rows, INV_127)
    result = np.empty(codes.shape, np.float32) if out is None else out
    inv = np.float32(INV_127)

    def work(c: np.ndarray, o: np.ndarray, s: np.ndarray) -> None:
        np.copyto(o, c, casting="unsafe")  # int8 -> float32 is exact
        with np.errstate(over="ignore", invalid="ignore"):
            o *= s
            o *= inv

    run_in_bands(work, np.ascontiguousarray(codes), result, np.ascontiguousarray(scale))
    return result
