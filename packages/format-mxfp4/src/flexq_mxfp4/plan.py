"""Local read plans: the source boxes one rank's box of an MXFP4 tensor needs.

The target box is first turned into storage orientation (for gpt-oss experts,
a box [e0:e0+ne, i0:i0+ni, o0:o0+no] of the logical [E, in, out] reads rows
o0..o0+no of ``*_blocks``). Leading axes then map one to one onto the sources;
along the blocked last axis the plan reads the blocks covering the range
(i0..i0+ni), which may start and end inside a block: decode trims them (the
trim follows from the target alone, so global plans need no extra detail).
The plan declares the scales, so the core checks them for NaN and infinity
before anything is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq import ReadPlan, TargetSlice

if TYPE_CHECKING:
    from flexq_mxfp4.layout import MxTensor


def local_plan(tensor: MxTensor, target: TargetSlice) -> ReadPlan:
    """The plan reading only the blocks that cover ``target``."""
    offset = tensor.to_stored(target.global_offset)
    shape = tensor.to_stored(target.local_shape)
    lead_off, lead_shape = offset[:-1], shape[:-1]
    first, count = tensor.covering_blocks(offset[-1], shape[-1])
    return ReadPlan(
        "local",
        {
            tensor.packed_key: tensor.packed_box(lead_off, lead_shape, first, count),
            tensor.scale_key: tensor.scale_box(lead_off, lead_shape, first, count),
        },
        target,
        scales=(tensor.scale_key,),
    )
