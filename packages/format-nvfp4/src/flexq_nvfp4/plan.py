"""Local read plans: the source boxes one rank's box of an NVFP4 tensor needs.

Leading axes (rows) map one to one onto the codes and block scales. Along the
blocked last axis the plan reads the 16-element blocks covering the target's
range, which may start and end inside a block; the decoder decodes those blocks and
trims (the trim follows from the target alone). Every plan reads the one-element
global scale whole.
"""

from __future__ import annotations

from flexq import ReadPlan, TargetSlice, block_cover
from flexq_nvfp4.layout import BLOCK, Nvfp4Tensor


def local_plan(tensor: Nvfp4Tensor, target: TargetSlice) -> ReadPlan:
    """The plan reading only the blocks that cover ``target``."""
    lead_off, lead_shape = target.global_offset[:-1], target.local_shape[:-1]
    first, count = covering_blocks(tensor, target)
    return ReadPlan(
        "local",
        {
            tensor.packed_key: tensor.packed_box(lead_off, lead_shape, first, count),
            tensor.scale_key: tensor.scale_box(lead_off, lead_shape, first, count),
            tensor.global_key: tensor.global_box(),
        },
        target,
    )


def covering_blocks(tensor: Nvfp4Tensor, target: TargetSlice) -> tuple[int, int]:
    """(first block, block count) covering the target's range of the last axis."""
    return block_cover(target.global_offset[-1], target.local_shape[-1], BLOCK, tensor.n)


def trim_of(target: TargetSlice) -> int:
    """Elements of the first covering block that lie before the target's range."""
    return target.global_offset[-1] % BLOCK
