"""Keep-quantized targets: a checkpoint's FP8, MXFP4 or NVFP4 weight loaded as its own bytes.

For users serving quantized weights (issue 26): a :class:`QuantizedTarget` in
:func:`flexq.load_state_dict`'s state dict receives, for one logical key, the
checkpoint's values byte for byte in the kept form of :mod:`flexq.load.kept_forms`
and its scales converted only where the conversion is exact (a copy; bfloat16,
float16, E8M0 or E4M3 widened to float32; float32 powers of two into uint8 E8M0;
a per-tensor scale broadcast into a per-channel or block grid). Nothing is
decoded. Every check of form, dtypes, shapes and block alignment of each shard
runs before the first read; the scales read are checked as the dequantizing
path checks them; only the shard's values box and the scale blocks that cover
it are read, and written only once the whole load has passed its checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.errors import TargetError
from flexq.formatkit import ceil_div, check_scales, ops_for, scale_to_float32
from flexq.load.kept_aoa import KeptBox, boxes
from flexq.load.kept_forms import (
    NVFP4_RULE,
    SCALE_TARGETS,
    VALUE_TARGETS,
    KeptForm,
    reciprocal_global,
)
from flexq.load.targets import Target, describe

if TYPE_CHECKING:
    from flexq.compose import ComposedTransform
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
    ct: ComposedTransform, kept: dict[str, QuantizedTarget], options: LoadOptions | None = None
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
    ct: ComposedTransform, key: str, qt: QuantizedTarget, options: LoadOptions | None
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


def _grid(shape: tuple[int, ...], block: tuple[int, ...]) -> tuple[int, ...]:
    """The scale grid of ``block`` over ``shape`` (a partial last block counts)."""
    return tuple(ceil_div(s, b) for s, b in zip(shape, block, strict=True))


def _grid_box(
    offset: tuple[int, ...], shape: tuple[int, ...], block: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The offset and shape, in the scale grid of ``block``, of the blocks covering the box."""
    start = tuple(o // b for o, b in zip(offset, block, strict=True))
    end = tuple(ceil_div(o + n, b) for o, n, b in zip(offset, shape, block, strict=True))
    return start, tuple(e - s for s, e in zip(start, end, strict=True))


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
    grid = _grid(shape, block)
    offset, local = _grid_box(values.offset, values.local_shape, block)
    if (scales.global_shape, scales.offset, scales.local_shape) != (grid, offset, local):
        raise TargetError(
            f"kept target {key!r}: scales must be the grid {list(grid)} of block {list(block)}, "
            f"this shard holding offset {list(offset)} shape {list(local)}; got "
            f"{list(scales.global_shape)} at {list(scales.offset)} shape {list(scales.local_shape)}"
        )


@dataclass(frozen=True)
class KeptScales:
    """One kept target's scales, read, checked and converted to the parts' dtypes."""

    piece: KeptPiece
    scales: np.ndarray
    global_scale: np.ndarray | None


def check(ct: ComposedTransform, pieces: list[KeptPiece]) -> list[KeptScales]:
    """Read the scale blocks covering each piece's values shard, check them as the
    dequantizing path does (:func:`flexq.formatkit.check_scales`) and convert them
    exactly: the data checks of kept targets, run before the load's first write."""
    return [_check_one(ct, p) for p in pieces]


def _check_one(ct: ComposedTransform, p: KeptPiece) -> KeptScales:
    if p.form.per_tensor:
        scales = _box_scales(ct, p, p.boxes[0])[0]
        scales = np.broadcast_to(scales.reshape(()), p.scales.local_shape).copy()
        return KeptScales(p, scales, _global(ct, p, [_box_scales(ct, p, p.boxes[0])[1]]))
    dtype = np.float32 if p.scales.dtype == "float32" else np.uint8
    out = np.zeros(p.scales.local_shape, dtype)
    raws = []
    for box in p.boxes:
        scales, raw = _box_scales(ct, p, box)
        raws.append(raw)
        at, _ = _grid_box(box.at, box.dst_shape, p.target_block)
        place = tuple(
            slice(a - o, a - o + n)
            for a, o, n in zip(at, p.scales.offset, scales.shape, strict=True)
        )
        out[place] = scales
    return KeptScales(p, out, _global(ct, p, raws))


def _box_scales(ct: ComposedTransform, p: KeptPiece, box: KeptBox) -> tuple[np.ndarray, np.ndarray]:
    """One box's stored scales, checked and converted (in the target's orientation), and
    the stored scale bytes."""
    form = box.form
    raw, box_offset = _read_scales(ct, box)
    info = ct.checkpoint.info(form.scale_key)
    f32 = np.asarray(scale_to_float32(ops_for(raw), raw, info.dtype))
    check_scales(f32, scale=info, logical_key=form.key, format_name=form.owner, offset=box_offset)
    scales = _convert_scales(p, form, raw, f32, info.dtype)
    return (np.swapaxes(scales, -1, -2) if box.transposed else scales), raw


def _read_scales(ct: ComposedTransform, box: KeptBox) -> tuple[np.ndarray, tuple[int, ...]]:
    """The stored scale box covering a values box, and its offset in the stored tensor."""
    form = box.form
    stored = form.grid
    if form.per_tensor:
        return ct.checkpoint.read(form.scale_key), (0,) * len(stored)
    offset, local = _grid_box(box.offset, box.shape, form.block)
    if len(stored) < len(offset):
        # per-channel stored as (out,): the covering box minus its last dim.
        raw = ct.checkpoint.read(form.scale_key, offset[: len(stored)], local[: len(stored)])
        return raw.reshape(local), offset[: len(stored)]
    return ct.checkpoint.read(form.scale_key, offset, local), offset


def _convert_scales(
    p: KeptPiece, form: KeptForm, raw: np.ndarray, f32: np.ndarray, dtype: str
) -> np.ndarray:
    """Stored scales in the target's dtype; exact, or a TargetError."""
    want = p.scales.dtype
    if want == "float32":
        return f32
    if dtype in ("U8", "F8_E8M0", "F8_E4M3"):
        return raw  # uint8 E8M0 or E4M3 bytes, kept as stored
    # float scales into E8M0: exact for positive powers of two in [2^-127, 2^127] only
    mant, exp = np.frexp(f32)
    code = exp.astype(np.int64) - 1 + 127
    bad = ~((mant == 0.5) & (code >= 0) & (code <= 254))
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise TargetError(
            f"kept target {p.key!r}: scale {form.scale_key!r} ({dtype}) holds "
            f"{float(f32[at])!r} at box index {list(at)}, which is no power of two in "
            "E8M0's range: it cannot become a uint8 E8M0 scale; use float32 scales"
        )
    out: np.ndarray = code.astype(np.uint8)
    return out


def _global(ct: ComposedTransform, p: KeptPiece, raws: list[np.ndarray]) -> np.ndarray | None:
    """NVFP4's global scale as the kept rule's multiplier (checked like the decoder's): one
    value for the target, so every box AOA fuses into it must have the same."""
    if p.global_scale is None:
        return None
    found = set()
    for box, codes in zip(p.boxes, raws, strict=True):
        key = box.form.global_key
        if key is None:
            continue
        info = ct.checkpoint.info(key)
        g = np.float32(ct.checkpoint.read(key).reshape(-1)[0])
        check_scales(g, scale=info, logical_key=box.form.key, format_name=box.form.owner)
        found.add(float(reciprocal_global(p.key, key, g, codes) if box.form.divides else g))
    if len(found) != 1:
        raise TargetError(
            f"kept target {p.key!r}: AOA fuses NVFP4 tensors with different global scales "
            f"{sorted(found)}; one kept target has one global scale: load it dequantized"
        )
    return np.full(p.global_scale.local_shape, found.pop(), np.float32)


def write(ct: ComposedTransform, checked: list[KeptScales]) -> None:
    """Read each piece's values boxes and write them with its scales, one piece at a time
    (every check has passed), so memory above the targets stays near one piece."""
    for c in checked:
        p = c.piece
        _assign(p.values, _values(ct, p))
        _assign(p.scales, c.scales)
        if p.global_scale is not None and c.global_scale is not None:
            _assign(p.global_scale, c.global_scale)


def _values(ct: ComposedTransform, p: KeptPiece) -> np.ndarray:
    """The target's local values, from the checkpoint's own bytes of every box."""
    (first, *more) = p.boxes
    if not more and not first.transposed:
        return first.form.read_values(ct.checkpoint, first.offset, first.shape)
    out = np.zeros(p.values.local_shape, np.uint8)
    for box in p.boxes:
        got = box.form.read_values(ct.checkpoint, box.offset, box.shape)
        got = np.swapaxes(got, -1, -2) if box.transposed else got
        place = tuple(
            slice(a - o, a - o + n)
            for a, o, n in zip(box.at, p.values.offset, got.shape, strict=True)
        )
        out[place] = got
    return out


def _assign(target: Target, array: np.ndarray) -> None:
    import paddle

    value = paddle.to_tensor(np.ascontiguousarray(array))
    if target.dtype == "float8_e4m3fn":
        value = value.view(paddle.float8_e4m3fn)  # the stored bytes, not a cast
    if target.lazy:
        # A lazy parameter (built under paddle.LazyGuard) has no place yet: set_value
        # allocates it where Paddle puts new tensors.
        target.tensor.set_value(value)
    else:
        target.tensor.copy_(value.to(target.tensor.place).reshape(list(target.local_shape)), False)
