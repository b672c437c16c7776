"""Read plans for FP8 weights: the weight box itself plus the scale blocks that cover it.

FP8 weights are addressable per element, so a rank reads exactly its rows and
columns of the weight; only the scale grid is rounded out to whole blocks
(a box may start or end inside a block, or be smaller than one block).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq import ReadPlan, TargetSlice

if TYPE_CHECKING:
    from flexq_fp8.layout import Fp8Layout


def local_plan(layout: Fp8Layout, target: TargetSlice) -> ReadPlan:
    """The local plan producing ``target`` from the weight box and the covering scale box."""
    grid_offset, grid_shape = layout.grid_cover(target.global_offset, target.local_shape)
    return ReadPlan(
        "local",
        {
            layout.weight_key: target.box,
            layout.scale_key: layout.scale_box(grid_offset, grid_shape),
        },
        target,
        scales=(layout.scale_key,),
    )
