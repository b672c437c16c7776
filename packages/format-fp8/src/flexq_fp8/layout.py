"""The geometry of one FP8 weight and its scale: block sizes, the scale grid, scale boxes.

Every published FP8 layout is a block grid over the weight: per-tensor is one
block, per-channel is blocks of ``(1, in)``, compressed-tensors groups are
``(1, g)``, DeepSeek-style block scales are ``(128, 128)``, and stacked experts
``[E, out, in]`` add a leading dimension with blocks of 1. The scale grid is
``ceil(shape / block)`` per dimension. The scale may be stored with size-1
dimensions dropped or added (a 0-d per-tensor scale, ``(out,)`` per-channel
scales); :class:`Fp8Layout` maps grid boxes onto the stored tensor.

Used by :mod:`flexq_fp8.detect` (which builds layouts), :mod:`flexq_fp8.plan`
and :mod:`flexq_fp8.decode`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from flexq import FormatError
from flexq.formatkit import block_cover, ceil_div

#: The block edge producers use when nothing else says (DeepSeek-V3, Qwen3-FP8).
DEFAULT_BLOCK = 128

#: One candidate block size over the last two dims; None means "the whole dimension".
BlockCandidate = tuple[int | None, int | None]


@dataclass(frozen=True)
class Fp8Layout:
    """How one logical FP8 weight is stored.

    :ivar weight_key: the F8_E4M3 tensor (also the logical key).
    :ivar scale_key: the scale tensor beside it.
    :ivar scale_dtype: safetensors dtype of the scale (F32, F16, BF16, U8, F8_E8M0).
    :ivar shape: shape of the weight and of the logical tensor.
    :ivar block: block edge per dimension (``ceil(shape / block)`` is the grid).
    :ivar scale_shape: the scale tensor's stored shape.
    :ivar dtype: natural dtype of the logical weight (the model's ``torch_dtype``).
    """

    weight_key: str
    scale_key: str
    scale_dtype: str
    shape: tuple[int, ...]
    block: tuple[int, ...]
    scale_shape: tuple[int, ...]
    dtype: str

    @property
    def sources(self) -> tuple[str, str]:
        """The two physical tensors: the F8 weight, then its scale."""
        return self.weight_key, self.scale_key

    @property
    def grid(self) -> tuple[int, ...]:
        """Number of scale blocks along each dimension of the weight."""
        return tuple(ceil_div(s, b) for s, b in zip(self.shape, self.block, strict=True))

    def grid_cover(
        self, offset: Sequence[int], shape: Sequence[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The grid box (first block, block count per dim) covering a box of the weight."""
        cover = [
            block_cover(o, n, b, s)
            for o, n, b, s in zip(offset, shape, self.block, self.shape, strict=True)
        ]
        return tuple(c[0] for c in cover), tuple(c[1] for c in cover)

    def scale_box(
        self, grid_offset: Sequence[int], grid_shape: Sequence[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The stored-scale box holding the grid box ``grid_offset`` + ``grid_shape``."""
        pairing = stored_pairing(self.grid, self.scale_shape)
        offset = tuple(0 if d is None else grid_offset[d] for d in pairing)
        shape = tuple(1 if d is None else grid_shape[d] for d in pairing)
        return offset, shape


def stored_pairing(grid: Sequence[int], stored: Sequence[int]) -> tuple[int | None, ...]:
    """For each stored scale dim, the grid dim it holds (None for an extra size-1 dim).

    The stored shape must equal the grid shape once size-1 dims are dropped from both.
    :raises ValueError: when it does not.
    """
    grid_dims = [d for d, g in enumerate(grid) if g != 1]
    stored_dims = [j for j, s in enumerate(stored) if s != 1]
    if [grid[d] for d in grid_dims] != [stored[j] for j in stored_dims]:
        raise ValueError(f"scale shape {tuple(stored)} does not hold a grid of {tuple(grid)}")
    pairs: list[int | None] = [None] * len(stored)
    for d, j in zip(grid_dims, stored_dims, strict=True):
        pairs[j] = d
    return tuple(pairs)


def infer_block(
    shape: tuple[int, ...],
    scale_shape: tuple[int, ...],
    candidates: Sequence[BlockCandidate] | None,
    where: str,
) -> tuple[int, ...]:
    """Block edges for a weight of ``shape`` whose scale is stored as ``scale_shape``.

    :param candidates: block sizes over the last two dims that config.json
        allows (the first that fits wins); None to infer them from the grid.
    :param where: "file: tensor 'key'" for error messages.
    :raises FormatError: when no allowed block size gives the stored grid.
    """
    if len(shape) < 2:
        raise FormatError(f"{where}: an FP8 weight needs at least 2 dims, got shape {shape}")
    whole = tuple(max(s, 1) for s in shape)
    if math.prod(scale_shape) == 1:
        return whole  # one scale for the whole tensor
    grid = scale_grid(shape, scale_shape, where)
    lead = tuple(
        _lead_block(s, g, where, d)
        for d, (s, g) in enumerate(zip(shape[:-2], grid[:-2], strict=True))
    )
    if candidates is None:
        last = tuple(_infer_edge(s, g, where) for s, g in zip(shape[-2:], grid[-2:], strict=True))
        return lead + last
    for cand in candidates:
        block = lead + tuple(whole[-2 + i] if c is None else c for i, c in enumerate(cand))
        if all(ceil_div(s, b) == g for s, b, g in zip(shape, block, grid, strict=True)):
            return block
    allowed = ", ".join(_show(c) for c in candidates)
    raise FormatError(
        f"{where}: scale grid {scale_shape} does not fit weight {shape} with the block "
        f"sizes config.json allows ({allowed}) (format fp8)"
    )


def scale_grid(shape: tuple[int, ...], scale_shape: tuple[int, ...], where: str) -> tuple[int, ...]:
    """The block grid a stored scale holds, one entry per weight dim.

    A scale with fewer dims drops trailing size-1 grid dims: ``(out,)`` per channel,
    ``(E,)`` per expert. ModelOpt's block export keeps the blocked reshape's size-1
    dims: ``[g0, 1, g1, 1]`` for a grid ``[g0, g1]`` (``fp8_pb_wo``).

    :raises FormatError: for any other scale with more dims than the weight.
    """
    n = len(shape)
    if len(scale_shape) == 2 * n and all(s == 1 for s in scale_shape[1::2]):
        return scale_shape[0::2]
    if len(scale_shape) > n:
        raise FormatError(
            f"{where}: scale of shape {scale_shape} has more dims than the weight {shape} "
            f"(format fp8)"
        )
    return scale_shape + (1,) * (n - len(scale_shape))


def _show(c: BlockCandidate) -> str:
    return "x".join("all" if e is None else str(e) for e in c)


def _lead_block(extent: int, g: int, where: str, dim: int) -> int:
    # Leading (expert) dims have one scale per index or one shared by all.
    if g == extent:
        return 1
    if g == 1:
        return max(extent, 1)
    raise FormatError(
        f"{where}: scale grid has {g} entries along dim {dim} of size {extent}; "
        f"expected {extent} or 1 (format fp8)"
    )


def _infer_edge(extent: int, g: int, where: str) -> int:
    """The block edge giving ``g`` blocks over ``extent`` elements (ceil division).

    Several edges can give the same grid (300 rows in 3 blocks: 100..149); take
    128 when it fits, the whole extent for one block, else a power of two in the
    range, else the smallest edge.
    """
    if extent == 0 and g == 0:
        return DEFAULT_BLOCK
    lo = ceil_div(extent, g) if g > 0 else 0
    if g <= 0 or lo == 0 or ceil_div(extent, lo) != g:
        raise FormatError(
            f"{where}: no block size splits {extent} elements into {g} scale blocks (format fp8)"
        )
    hi = math.inf if g == 1 else ceil_div(extent, g - 1) - 1
    if lo <= DEFAULT_BLOCK <= hi:
        return DEFAULT_BLOCK
    if g == 1:
        return extent
    powers = [1 << k for k in range(extent.bit_length() + 1) if lo <= 1 << k <= hi]
    return powers[-1] if powers else lo
