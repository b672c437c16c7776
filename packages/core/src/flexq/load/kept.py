"""Keep-quantized targets: a checkpoint's FP8, MXFP4 or NVFP4 weight loaded as its own bytes.

For users serving quantized weights (issue 26): a :class:`QuantizedTarget` in
:func:`flexq.load_state_dict`'s state dict receives, for one logical key, the
checkpoint's values byte for byte in the kept form of :mod:`flexq.load.kept_forms`
and its scales converted only where the conversion is exact (a copy; bfloat16,
float16, E8M0 or E4M3 widened to float32; float32 powers of two into uint8 E8M0;
a per-tensor scale broadcast into a per-channel or block grid). Nothing is
decoded. This module checks form, dtypes, shapes and the block alignment of each
shard (and of each box AOA moves, :mod:`flexq.load.kept_boxes`) before anything is
read; :mod:`flexq.load.kept_read` then reads only the shard's values box and the
scale blocks that cover it, checks the scales as the dequantizing path checks
them, and writes once the whole load has passed its checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flexq.errors import TargetError
from flexq.load.kept_boxes import KeptBox, boxes
from flexq.load.kept_forms import (
    NVFP4_RULE,
    SCALE_TARGETS,
    VALUE_TARGETS,
    KeptForm,
    grid_box,
    scale_grid,
)
from flexq.load.targets import Target, describe

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.load.report import LoadOptions


@dataclass(frozen=True)
class QuantizedTarget:
    """A keep-quantized target for one logical key (the state dict key decides).

    Each part may be a plain tensor, a dist tensor or a ShardedWeight; the quantization
    axis is last (docs/formats.md, "Kept forms").

    :ivar values: FP8: float8_e4m3fn ``[..., N, K]``; MXFP4 and NVFP4: uint8
        ``[..., N, K/2]``, two E2M1 codes a byte, low nibble first.
    :ivar scales: FP8: float32 ``[]``/``[1]`` per tensor, ``[..., N, 1]`` per channel or
        ``[..., ceil(N/bn), ceil(K/bk)]`` per block (or uint8 E8M0 of those shapes);
        value = values * scale. MXFP4: uint8 E8M0 (or float32) ``[..., N, K/32]``.
        NVFP4: float8_e4m3fn (or float32) ``[..., N, K/16]``.
    :ivar global_scale: NVFP4 only: float32 ``[1]``, with W = e2m1(values) *
        (float32(scales) * global_scale) (:data:`flexq.load.kept_forms.NVFP4_RULE`).
    :ivar block: ``(bn, bk)`` only to broadcast a per-tensor checkpoint scale into a
        block grid; otherwise the block is the checkpoint's own.
    """

    values: Any
    scales: Any
    global_scale: Any = None
    block: tuple[int, int] | None = None


@dataclass(frozen=True)
class KeptPiece:
    """One checked kept target: its form and where each part goes."""

    key: str
    form: KeptForm
    values: Target
    scales: Target
    global_scale: Target | None
    #: the target scale grid's block (the checkpoint's, or the broadcast one).
    target_block: tuple[int, ...]
    #: the source boxes that fill ``values`` (one, unless AOA fuses several).
    boxes: tuple[KeptBox, ...] = ()


def split(flat: dict[Any, Any]) -> tuple[dict[str, QuantizedTarget], dict[Any, Any]]:
    """The kept targets of a flattened state dict, and everything else."""
    kept = {k: v for k, v in flat.items() if isinstance(v, QuantizedTarget)}
    rest = {k: v for k, v in flat.items() if not isinstance(v, QuantizedTarget)}
    for k in kept:
        if not isinstance(k, str):
            raise TargetError(f"kept target {k!r}: key a QuantizedTarget by its logical name")
    return kept, rest


def plan(
    ct: Composition, kept: dict[str, QuantizedTarget], options: LoadOptions | None = None
) -> list[KeptPiece]:
    """Check every kept target against the checkpoint and the load's AOA statements
    (no file is read)."""
    return [_plan_one(ct, key, qt, options) for key, qt in sorted(kept.items())]


def _part(key: str, name: str, part: Any) -> Target:
    found = describe({key: part})
    if len(found) != 1:
        raise TargetError(f"kept target {key!r}: its {name} must be one tensor on this rank")
    return found[0]


def _plan_one(
    ct: Composition, key: str, qt: QuantizedTarget, options: LoadOptions | None
) -> KeptPiece:
    values = _part(key, "values", qt.values)
    scales = _part(key, "scales", qt.scales)
    found = boxes(ct, key, values, options)
    form = found[0].form
    want = VALUE_TARGETS[form.kind]
    shape = values.global_shape if found[0].statement else form.shape
    if values.dtype != want or values.global_shape != shape:
        raise TargetError(
            f"kept target {key!r} ({form.kind} kept form): values must be {want} of shape "
            f"{list(shape)}, not {values.dtype} {list(values.global_shape)}"
        )
    if scales.dtype not in SCALE_TARGETS[form.kind]:
        raise TargetError(
            f"kept target {key!r} ({form.kind} kept form): scales must be "
            f"{' or '.join(SCALE_TARGETS[form.kind])}, not {scales.dtype}"
        )
    glob = _global_part(key, form, qt.global_scale)
    if len(found) == 1 and not found[0].transposed:
        target_block = _target_block(key, form, shape, scales, qt.block)
    else:
        target_block = _moved_block(key, found, qt.block)
    for box in found:
        _check_box(key, values, box, target_block)
    _check_scale_box(key, form, shape, values, scales, target_block)
    return KeptPiece(key, form, values, scales, glob, target_block, tuple(found))


def _moved_block(key: str, found: list[KeptBox], asked: tuple[int, int] | None) -> tuple[int, ...]:
    """The one block, in the target's orientation, of every box AOA moves into it."""
    blocks = set()
    for box in found:
        b = box.form.block
        if box.form.per_tensor:
            raise TargetError(
                f"kept target {key!r}: AOA statement {box.statement!r} moves per-tensor "
                f"scaled {box.form.key!r}; only block and channel scales combine exactly"
            )
        blocks.add((*b[:-2], b[-1], b[-2]) if box.transposed else b)
    if len(blocks) != 1 or asked is not None:
        raise TargetError(
            f"kept target {key!r}: AOA statements combine blocks {sorted(blocks)}; "
            "a kept target has one block (and block= only broadcasts a per-tensor scale)"
        )
    return blocks.pop()


def _global_part(key: str, form: KeptForm, part: Any) -> Target | None:
    if form.kind != "nvfp4":
        if part is not None:
            raise TargetError(
                f"kept target {key!r}: global_scale is for NVFP4 kept forms; pass None for "
                f"{form.kind}"
            )
        return None
    if part is None:
        raise TargetError(
            f"kept target {key!r}: the NVFP4 kept form needs global_scale, float32 [1] "
            f"({NVFP4_RULE})"
        )
    glob = _part(key, "global_scale", part)
    if glob.dtype != "float32" or glob.global_shape not in ((), (1,)):
        raise TargetError(
            f"kept target {key!r}: global_scale must be float32 [1], not {glob.dtype} "
            f"{list(glob.global_shape)}"
        )
    return glob


def _target_block(
    key: str,
    form: KeptForm,
    shape: tuple[int, ...],
    scales: Target,
    asked: tuple[int, int] | None,
) -> tuple[int, ...]:
    block = form.block
    lead = (1,) * (len(shape) - 2)
    if form.per_tensor and asked is not None:
        return (*lead, *asked)
    if asked is not None and (*lead, *asked) != block:
        raise TargetError(
            f"kept target {key!r}: block={asked} differs from the checkpoint's block "
            f"{list(block[-2:])}; block= only broadcasts a per-tensor scale"
        )
    if form.per_tensor and scales.global_shape == (*shape[:-1], 1):
        return (*lead, 1, shape[-1])  # an exact broadcast into per-channel
    return block


def _check_box(key: str, values: Target, box: KeptBox, block: tuple[int, ...]) -> None:
    """vLLM's validate_fp8_block_shape rule, for the source box and where it lands: each
    starts on a block boundary and ends on one or at its tensor's end (a partial last
    block of the source only at the end of the target too). Leading axes (stacked
    experts) have blocks of 1. A per-tensor scale has no block to cut."""
    form = box.form
    src_block = form.block
    if box.transposed:
        src_block = (*src_block[:-2], src_block[-1], src_block[-2])
    src_off = box.offset if not box.transposed else (*box.offset[:-2], *box.offset[:-3:-1])
    src_shape = form.shape if not box.transposed else (*form.shape[:-2], *form.shape[:-3:-1])
    for d, n in enumerate(box.dst_shape):
        o_s, o_d, s_end, d_end = src_off[d], box.at[d], src_shape[d], values.global_shape[d]
        checks = [(src_block[d], "the checkpoint's block")] if not form.per_tensor else []
        if not (form.per_tensor and block == form.shape):  # else one scale: nothing to cut
            checks.append((block[d], "the target's block"))
        for b, what in checks:
            partial = (o_s + n) % b != 0 or (o_d + n) % b != 0
            if o_s % b or o_d % b or (partial and not (o_s + n == s_end and o_d + n == d_end)):
                moved = (
                    f" (AOA statement {box.statement!r} moves {form.key!r} box at offset "
                    f"{list(box.offset)} there)"
                    if box.statement
                    else ""
                )
                raise TargetError(
                    f"kept target {key!r}: the values shard at offset {list(values.offset)} "
                    f"(shape {list(values.local_shape)}){moved} cuts {what} {list(block)} "
                    f"along dim {d}; shard and fuse quantized weights on block boundaries"
                )


def _check_scale_box(
    key: str,
    form: KeptForm,
    shape: tuple[int, ...],
    values: Target,
    scales: Target,
    block: tuple[int, ...],
) -> None:
    if form.per_tensor and block == shape:
        if scales.global_shape not in ((), (1,)):
            raise TargetError(
                f"kept target {key!r}: a per-tensor scale needs scales of shape [] or [1] "
                f"(or block=(bn, bk) to broadcast it), not {list(scales.global_shape)}"
            )
        return
    grid = scale_grid(shape, block)
    offset, local = grid_box(values.offset, values.local_shape, block)
    if (scales.global_shape, scales.offset, scales.local_shape) != (grid, offset, local):
        raise TargetError(
            f"kept target {key!r}: scales must be the grid {list(grid)} of block {list(block)}, "
            f"this shard holding offset {list(offset)} shape {list(local)}; got "
            f"{list(scales.global_shape)} at {list(scales.offset)} shape {list(scales.local_shape)}"
        )
