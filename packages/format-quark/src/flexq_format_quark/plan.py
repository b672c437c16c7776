"""Read plans: which boxes of a Quark linear's components one box of ``X.weight`` needs.

A box [o0:o0+no, i0:i0+ni] of the logical [out, in] weight needs:

- FP8: the same box of ``weight``; the whole 0-d per-tensor scale, or rows o0..
  of the per-channel scale;
- int4/uint4 (stored [in, out/8], packed along out): ``weight`` rows i0.. and the
  packed columns covering o0..; ``weight_zero_point`` the groups covering i0.. and
  the same packed columns; ``weight_scale`` those groups and exactly columns o0..;
- MXFP4: the bytes of the 32-element blocks covering i0.. and their scales
  (:func:`flexq.formatkit.nibble_block_boxes`).

The decoder trims the extra codes of partly covered words, groups and blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq import ReadPlan, TargetSlice, block_cover
from flexq.formatkit import nibble_block_boxes
from flexq_format_quark.layout import PACK

if TYPE_CHECKING:
    from flexq.plan import Box
    from flexq_format_quark.layout import QuarkLinear


def source_boxes(linear: QuarkLinear, target: TargetSlice, scale_ndim: int) -> dict[str, Box]:
    """The source boxes (offset, shape) that produce the ``target`` box of ``linear``.

    :param scale_ndim: the stored ``weight_scale``'s rank (FP8 scales may be 0-d,
        ``[1]``, ``[out]`` or ``[out, 1]``).
    """
    (o0, i0), (no, ni) = target.global_offset, target.local_shape
    if linear.kind == "mxfp4":
        codes, scales, _ = nibble_block_boxes(target, linear.group_size, linear.in_features)
        return {linear.weight: codes, linear.scale: scales}
    if linear.packed:
        g0, ng = block_cover(i0, ni, linear.group_size, linear.in_features)
        c0, nc = block_cover(o0, no, PACK, linear.out_features)
        return {
            linear.weight: ((i0, c0), (ni, nc)),
            linear.zero: ((g0, c0), (ng, nc)),
            linear.scale: ((g0, o0), (ng, no)),
        }
    if linear.kind == "fp8-tensor":
        scale: Box = ((0,) * scale_ndim, (1,) * scale_ndim)
    else:
        scale = ((o0, 0)[:scale_ndim], (no, 1)[:scale_ndim])
    return {linear.weight: target.box, linear.scale: scale}


def local_plan(linear: QuarkLinear, target: TargetSlice) -> ReadPlan:
    """A plan that reads only the codes, groups and scales covering ``target``."""
    scales = (linear.scale, linear.zero) if linear.packed else (linear.scale,)
    boxes = source_boxes(linear, target, linear.scale_ndim)
    return ReadPlan("local", boxes, target, scales=scales)
