"""Local read plans: the source boxes one rank's box of an NVFP4 tensor needs.

Leading axes (rows) map one to one onto the codes and block scales. Along the
blocked last axis the plan reads the 16-element blocks covering the target's
range, which may start and end inside a block (the kit's
:func:`flexq.formatkit.nibble_block_boxes`); the decoder decodes those blocks and
trims (the trim follows from the target alone). Every plan reads the
one-element global scale whole. Both scales are declared: the core checks the
block scales (and ModelOpt's multiplying global scale) for NaN and infinity before
the first write, then :func:`flexq_nvfp4.decode.check` a global scale the
definition divides by (zero: non-finite for compressed-tensors) and what only the
combination reveals (a product beyond float32).
"""

from __future__ import annotations

from functools import partial

from flexq import ReadPlan, TargetSlice
from flexq.formatkit import nibble_block_boxes
from flexq_nvfp4.decode import check, divides
from flexq_nvfp4.layout import BLOCK, Nvfp4Tensor


def local_plan(tensor: Nvfp4Tensor, target: TargetSlice) -> ReadPlan:
    """The plan reading only the blocks that cover ``target``."""
    codes, blocks, _ = nibble_block_boxes(target, BLOCK, tensor.n)
    boxes = {
        tensor.packed_key: codes,
        tensor.scale_key: blocks,
        tensor.global_key: tensor.global_box(),
    }
    # A global scale the definition divides by is the check's to judge (infinity there
    # gives zeros, not infinities); ModelOpt's multiplies, a scale like any other.
    scales: tuple[str, ...] = (tensor.scale_key,)
    checks: tuple[str, ...] = (tensor.global_key,)
    if not divides(tensor.producer):
        scales, checks = (*scales, *checks), ()
    return ReadPlan("local", boxes, target, scales, checks, partial(check, tensor))
