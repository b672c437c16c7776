"""Read plans: which boxes of qweight, qzeros and scales one box of ``X.weight`` needs.

Used by the plugin's ``flexq_read_plan``. A box [o0:o0+no, i0:i0+ni] of the
logical [out, in] weight needs:

- GEMM (packed along out): qweight rows i0.. and the packed columns covering
  out columns o0..; qzeros the groups covering i0.. and the same packed
  columns; scales the same groups and exactly the out columns o0...
- GEMV (packed along in): qweight rows o0.. and the packed columns covering
  in columns i0..; scales rows o0.. and the covering groups; qzeros rows o0..
  and the packed columns covering those groups.

The decoder trims the extra codes of partly covered words and groups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq import ReadPlan, TargetSlice, block_cover
from flexq_int4_awq.layout import PACK, AwqLinear

if TYPE_CHECKING:
    from flexq.plan import Box


def source_boxes(linear: AwqLinear, target: TargetSlice) -> dict[str, Box]:
    """The source boxes (offset, shape) that produce the ``target`` box of ``linear``."""
    (o0, i0), (no, ni) = target.global_offset, target.local_shape
    g = linear.group_size
    g0, ng = block_cover(i0, ni, g, linear.in_features)
    if linear.version == "gemm":
        c0, nc = block_cover(o0, no, PACK, linear.out_features)
        return {
            linear.qweight: ((i0, c0), (ni, nc)),
            linear.qzeros: ((g0, c0), (ng, nc)),
            linear.scales: ((g0, o0), (ng, no)),
        }
    c0, nc = block_cover(i0, ni, PACK, linear.in_features)
    z0, nz = block_cover(g0, ng, PACK, linear.n_groups)
    return {
        linear.qweight: ((o0, c0), (no, nc)),
        linear.qzeros: ((o0, z0), (no, nz)),
        linear.scales: ((o0, g0), (no, ng)),
    }


def local_plan(linear: AwqLinear, target: TargetSlice) -> ReadPlan:
    """A plan that reads only the words and groups covering ``target``."""
    return ReadPlan("local", source_boxes(linear, target), target, scales=(linear.scales,))
