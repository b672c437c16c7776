"""4-bit codes in blocks along the last axis: what a local read plan of them reads.

For formats that store a tensor ``[..., n]`` as codes packed two per byte along
the last axis (``[..., n/2]`` bytes) with one scale per block of ``block``
elements (``[..., ceil(n/block)]``): NVFP4, the OCP MX layout of MXFP4. A
target box maps one to one along the leading axes; along the last it reads
the blocks covering its range, which may start and end inside a block, and
the decoder trims what lies outside.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.plan import block_cover

if TYPE_CHECKING:
    from flexq.plan import Box, TargetSlice


def nibble_block_boxes(target: TargetSlice, block: int, n: int) -> tuple[Box, Box, int]:
    """(codes box, scales box, trim) for ``target`` of a tensor ``[..., n]``.

    :param block: elements per scale (even).
    :return: the boxes of the packed bytes and of the block scales covering the
        target (a partial last block reads its bytes only), and how many elements
        of the first covering block lie before the target's range.
    """
    lead_off, lead_shape = target.global_offset[:-1], target.local_shape[:-1]
    first, count = block_cover(target.global_offset[-1], target.local_shape[-1], block, n)
    start = first * block // 2
    size = min(count * block // 2, n // 2 - start)
    codes: Box = ((*lead_off, start), (*lead_shape, size))
    scales: Box = ((*lead_off, first), (*lead_shape, count))
    return codes, scales, target.global_offset[-1] % block
