"""Local read plans: the boxes of each component one box of ``X.weight`` needs.

For a box ``[o0:o0+no, i0:i0+ni]`` of the logical ``[out, in]`` weight:

- the weight: rows ``o0..`` exactly; for ``weight_packed`` the int32 words
  holding columns ``i0..`` (a box edge inside a word reads that word; a dense
  odd-width code crossing a word boundary reads both), for an I8 ``weight``
  the columns exactly;
- the scale: the scale blocks covering the box (rows of blocks of ``b0``,
  columns of groups of ``g`` / ``b1``); a per-tensor scale whole;
- a packed zero point: the words covering rows ``o0..`` (packed along out)
  and the scale's group columns; a raw zero point: the scale's box;
- act-order ``weight_g_idx``: entries ``i0..i0+ni`` exactly, and the scale and
  zero point read every group of their rows, because the groups a column slice
  uses are scattered over all of them (act-order permutes columns by activation
  size) and a box must be contiguous;
- ``weight_shape`` whole (16 bytes): apply checks it against the geometry the
  headers gave, and a source no plan reads is an unexpected key to Paddle's
  ``load_state_dict``.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from flexq import ReadPlan, TargetSlice, block_cover
from flexq.formatkit import FLOAT_SCALE_DTYPES
from flexq_ct_int.decode import check_metadata

if TYPE_CHECKING:
    from flexq.plan import Box
    from flexq_ct_int.layout import CtLinear


def scale_cover(linear: CtLinear, o0: int, no: int, i0: int, ni: int) -> Box:
    """The box of the scale grid (first block, block count per dim) covering the weight box."""
    out_f, in_f = linear.shape
    r0, nr = block_cover(o0, no, linear.block[0], out_f)
    if linear.gidx_key is not None:
        c0, nc = (0, linear.scale_grid[1]) if no and ni else (0, 0)
    else:
        c0, nc = block_cover(i0, ni, linear.block[1], in_f)
    return (r0, c0), (nr, nc)


def _stored_scale_box(linear: CtLinear, cover: Box) -> Box:
    if len(linear.scale_shape) == 2:
        return cover
    # One scale for the whole tensor, stored as (1,) (or another shape of one element).
    empty = 0 in cover[1]
    return (0,) * len(linear.scale_shape), tuple(0 if empty else 1 for _ in linear.scale_shape)


def source_boxes(linear: CtLinear, target: TargetSlice) -> dict[str, Box]:
    """Source key -> (offset, shape) producing the ``target`` box of ``linear``."""
    (o0, i0), (no, ni) = target.global_offset, target.local_shape
    if linear.packed:
        c0, nc = linear.packing.word_cover(i0, ni)
        boxes: dict[str, Box] = {linear.weight_key: ((o0, c0), (no, nc))}
    else:
        boxes = {linear.weight_key: ((o0, i0), (no, ni))}
    cover = scale_cover(linear, o0, no, i0, ni)
    boxes[linear.scale_key] = _stored_scale_box(linear, cover)
    if linear.zero_key is not None:
        if linear.zero == "packed":
            w0, nw = linear.packing.word_cover(o0, no)
            (_, g0), (_, ng) = cover
            boxes[linear.zero_key] = ((w0, g0), (nw, ng))
        else:
            boxes[linear.zero_key] = _stored_scale_box(linear, cover)
    if linear.gidx_key is not None:
        boxes[linear.gidx_key] = ((i0,), (ni,))
    if linear.shape_key is not None:
        boxes[linear.shape_key] = ((0,), (2,))
    return boxes


def local_plan(linear: CtLinear, target: TargetSlice) -> ReadPlan:
    """A plan reading only the words, groups and entries ``target`` needs; the core checks
    its declared scales (a float zero point is one) and runs
    :func:`flexq_ct_int.decode.check_metadata` on ``weight_shape`` and ``weight_g_idx``
    before anything is written. Integer zero points need no check: every integer is one."""
    scales = [linear.scale_key]
    if linear.zero == "raw" and linear.zero_dtype in FLOAT_SCALE_DTYPES:
        assert linear.zero_key is not None
        scales.append(linear.zero_key)
    checks = tuple(k for k in (linear.gidx_key, linear.shape_key) if k is not None)
    check = partial(check_metadata, linear) if checks else None
    return ReadPlan("local", source_boxes(linear, target), target, tuple(scales), checks, check)
