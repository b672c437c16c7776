"""The AWQ dequantization, written once for numpy arrays and Paddle tensors.

Used by the plugin's ``flexq_apply``. For a box of the logical [out, in]
weight: W[o, i] = (q[o, i] - z[o, i // g]) * s[o, i // g], computed in float32.
Every step is exact (4-bit codes and zeros are small integers, their
difference times an F16/BF16 scale fits float32's mantissa), so the numpy and
Paddle paths give identical bits and the caller's single rounding is the only
one.

The boxes in ``plan.source_slices`` may be larger than needed (partly covered
words and groups, or whole tensors for a global plan); positions inside them
are found from the boxes' offsets, so one routine serves both plan modes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from flexq import ReadPlan, block_cover
from flexq.ops import ArrayOps, ops_for
from flexq_int4_awq.arrayops import int4_ops_for
from flexq_int4_awq.layout import PACK, AwqLinear
from flexq_int4_awq.packing import slots_for


def dequantize(linear: AwqLinear, sources: Mapping[str, Any], plan: ReadPlan) -> Any:
    """The float32 ``plan.target`` box of ``linear``'s weight from the planned source boxes."""
    qw, qz, sc = sources[linear.qweight], sources[linear.qzeros], sources[linear.scales]
    ops, int4 = ops_for(qw), int4_ops_for(qw)
    (o0, i0), (no, ni) = plan.target.global_offset, plan.target.local_shape
    (qw_r, qw_c), _ = plan.source_slices[linear.qweight]
    (qz_r, qz_c), _ = plan.source_slices[linear.qzeros]
    (sc_r, sc_c), _ = plan.source_slices[linear.scales]
    g = linear.group_size
    g0, ng = block_cover(i0, ni, g, linear.in_features)
    slots = slots_for(linear.version)
    scales = ops.float32(sc, linear.scale_dtype)
    if linear.version == "gemm":
        # Storage is [in, out]: unpack transposed so codes arrive as [out, in].
        o, i = o0 - PACK * qw_c, i0 - qw_r
        q = int4.unpack_int4(qw, slots, transposed=True)[o : o + no, i : i + ni]
        if no == 0 or ni == 0:
            return q
        o, gz = o0 - PACK * qz_c, g0 - qz_r
        z = int4.unpack_int4(qz, slots, transposed=True)[o : o + no, gz : gz + ng]
        o, gs = o0 - sc_c, g0 - sc_r
        s = int4.transpose(scales)[o : o + no, gs : gs + ng]
    else:
        o, i = o0 - qw_r, i0 - PACK * qw_c
        q = int4.unpack_int4(qw, slots, transposed=False)[o : o + no, i : i + ni]
        if no == 0 or ni == 0:
            return q
        o, gz = o0 - qz_r, g0 - PACK * qz_c
        z = int4.unpack_int4(qz, slots, transposed=False)[o : o + no, gz : gz + ng]
        o, gs = o0 - sc_r, g0 - sc_c
        s = scales[o : o + no, gs : gs + ng]
    # inf * 0 is NaN by definition; a non-finite scale is reported once, by the
    # plugin's ScaleWarning, not by numpy.
    with np.errstate(invalid="ignore", over="ignore"):
        return _grouped_affine(ops, q, z, s, g, i0 - g0 * g)


def _grouped_affine(ops: ArrayOps, q: Any, z: Any, s: Any, g: int, start: int) -> Any:
    """(q - z) * s with z, s [no, ng] given per group of ``g`` columns of q [no, ni].

    ``start`` is q's first column inside the first group.
    """
    no, ni = q.shape
    ng = z.shape[1]
    # q is a fresh array from unpack_int4, so it is updated in place (numpy
    # skips two full-size temporaries; Paddle rebinds, same values).
    if start == 0 and ni == ng * g:
        # Whole groups: broadcast over a group axis instead of repeating z and s.
        q3 = ops.reshape(q, (no, ng, g))
        q3 -= ops.reshape(z, (no, ng, 1))
        q3 *= ops.reshape(s, (no, ng, 1))
        return ops.reshape(q3, (no, ni))
    q -= ops.repeat(z, g, 1)[:, start : start + ni]
    q *= ops.repeat(s, g, 1)[:, start : start + ni]
    return q
