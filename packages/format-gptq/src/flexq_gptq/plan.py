"""Read plans: which boxes of qweight, qzeros, scales and g_idx one box of ``X.weight`` needs.

Used by the plugin's ``flexq_read_plan``; plans come from headers and config
only (no tensor data is read to plan). A box [o0:o0+no, i0:i0+ni] of the
logical [out, in] weight reads:

- qweight: the units of words covering input columns i0..i0+ni (a unit is one
  word, or three words of 32 codes for 3 bits) and exactly the columns o0..;
- g_idx: exactly i0..i0+ni;
- scales: the group rows below and exactly the columns o0..;
- qzeros: the same group rows and the units covering columns o0...

Group rows: without act-order (``desc_act: false``, or no ``X.g_idx``) a
column's group is ``i // g``, so the rows are the groups covering i0..i0+ni,
and the decoder checks that the stored ``g_idx`` agrees. With act-order the
groups are data scattered over the columns; GPTQ forms them from columns
sorted by the Hessian diagonal, so any contiguous run of a few group sizes of
columns meets nearly every group anyway (a half of the columns misses a group
of 128 with odds 2**-128), and the plan reads every group row: the bound there
is the box's scale and zero columns over all groups, ``1/g`` of the weight
box. Reading ``g_idx`` at plan time to narrow that would read bytes outside
the plan, which the loaders' "each rank reads exactly its plans" rule forbids.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from flexq import ReadPlan, TargetSlice, block_cover
from flexq_gptq.decode import check_g_idx

if TYPE_CHECKING:
    from flexq.plan import Box
    from flexq_gptq.layout import GptqLinear


def group_rows(linear: GptqLinear, i0: int, ni: int) -> tuple[int, int]:
    """(first row, rows) of scales/qzeros planned for input columns i0..i0+ni."""
    if linear.act_order:
        return 0, linear.n_groups if ni else 0
    return block_cover(i0, ni, linear.group_size, linear.in_features)


def source_boxes(linear: GptqLinear, target: TargetSlice) -> dict[str, Box]:
    """The source boxes (offset, shape) that produce the ``target`` box of ``linear``."""
    (o0, i0), (no, ni) = target.global_offset, target.local_shape
    p = linear.packing
    u0, nu = block_cover(i0, ni, p.unit_codes, linear.in_features)
    c0, nc = block_cover(o0, no, p.unit_codes, linear.out_features)
    g0, ng = group_rows(linear, i0, ni)
    uw = p.unit_words
    boxes: dict[str, Box] = {
        linear.qweight: ((u0 * uw, o0), (nu * uw, no)),
        linear.qzeros: ((g0, c0 * uw), (ng, nc * uw)),
        linear.scales: ((g0, o0), (ng, no)),
    }
    if linear.has_g_idx:
        boxes[linear.g_idx] = ((i0,), (ni,))
    return boxes


def local_plan(linear: GptqLinear, target: TargetSlice) -> ReadPlan:
    """A plan that reads only the words and groups covering ``target``; the core checks
    its scales and its ``g_idx`` (:func:`flexq_gptq.decode.check_g_idx`) before anything
    is written. The I32 ``qzeros`` need no check: every stored integer is a zero point."""
    boxes = source_boxes(linear, target)
    if not linear.has_g_idx:
        return ReadPlan("local", boxes, target, scales=(linear.scales,))
    check = partial(check_g_idx, linear)
    return ReadPlan("local", boxes, target, (linear.scales,), (linear.g_idx,), check)
