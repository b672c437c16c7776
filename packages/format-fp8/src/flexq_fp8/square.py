"""The one square block edge of a ModelOpt ``fp8_pb_wo`` checkpoint, from its shapes.

NVIDIA ModelOpt's ``FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG`` quantizes every weight in
square blocks (its exporter calls ``FP8QTensor.quantize`` with ``{-1: b, -2: b}``,
one ``b`` per checkpoint, padding partial edge blocks) but records ``b`` in neither
``config.json`` nor ``hf_quant_config.json``. The scale grids give, per dimension,
the range of edges ``e`` with ``ceil(extent / e) == blocks``; the checkpoint's edge
lies in the intersection over every weight. Used by :mod:`flexq_fp8.detect`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from flexq import FormatError
from flexq.formatkit import ceil_div

#: The block edge of ModelOpt's ``FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG`` preset; taken when
#: the shapes allow it (they cannot tell it from its neighbours: 256 rows in 2 blocks
#: fit every edge from 128 to 255).
PRESET_EDGE = 128


def edge_range(extent: int, blocks: int) -> tuple[int, float]:
    """The edges ``e`` (lo, hi inclusive) with ``ceil(extent / e) == blocks``; lo > hi
    when there is none."""
    if extent <= 0 or blocks <= 0:
        return 1, 0
    lo = ceil_div(extent, blocks)
    hi: float = math.inf if blocks == 1 else ceil_div(extent, blocks - 1) - 1
    return (lo, hi) if ceil_div(extent, lo) == blocks else (1, 0)


def square_edge(grids: Iterable[tuple[tuple[int, int], tuple[int, int], str]], algo: str) -> int:
    """The square edge every ``(weight [out, in], scale grid [g0, g1], where)`` agrees on.

    :raises FormatError: when no single edge fits every weight, or when several fit
        and the preset's 128 is not among them (naming the range: the block size
        must then come from the producer).
    """
    lo, hi = 1, math.inf
    first = ""
    for shape, grid, where in grids:
        first = first or where
        for extent, blocks in zip(shape, grid, strict=True):
            a, b = edge_range(extent, blocks)
            lo, hi = max(lo, a), min(hi, b)
            if lo > hi:
                raise FormatError(
                    f"{where}: scale grid {grid} of weight {shape} fits no square block edge "
                    f"that the other weights' grids allow; quant_algo {algo!r} uses one "
                    f"square block size for the whole checkpoint (format fp8)"
                )
    if lo <= PRESET_EDGE <= hi:
        return PRESET_EDGE
    if lo == hi:
        return int(lo)
    shown = f"{lo}..{'any' if hi == math.inf else int(hi)}"
    raise FormatError(
        f"{first}: quant_algo {algo!r} records no block size and the scale grids fit every "
        f"square edge in {shown}, which decode differently, so flexq cannot tell which "
        f"one the producer used; re-export with the preset's {PRESET_EDGE}x{PRESET_EDGE} "
        f"blocks (format fp8)"
    )
