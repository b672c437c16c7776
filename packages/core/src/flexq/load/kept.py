"""Keep-quantized targets: a checkpoint's FP8 weight loaded as its own bytes and exact scales.

For users serving quantized weights (issue 26, FP8 slice): a
:class:`QuantizedTarget` in :func:`flexq.load_state_dict`'s state dict receives,
for one logical key, the checkpoint's float8_e4m3fn values byte for byte and its
scales converted only where the conversion is exact (float32 copy, bfloat16 or
float16 widened to float32, a per-tensor scale broadcast into a per-channel or
block grid). Nothing is decoded. Every check (form, dtypes, shapes, block
alignment of each shard) runs before the first read; the boxes are read through
the checkpoint's read layer (only the shard's values box and the scale blocks
that cover it) and written only once the whole load has passed its checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.errors import TargetError
from flexq.load.targets import Target, describe
from flexq.plan import ceil_div

if TYPE_CHECKING:
    from flexq.compose import ComposedTransform

#: safetensors scale dtypes that widen to float32 exactly (:func:`_widen`).
_EXACT_SCALES = ("F32", "BF16", "F16")


@dataclass(frozen=True)
class QuantizedTarget:
    """A keep-quantized target for one logical key (the state dict key decides).

    :ivar values: float8_e4m3fn ``[..., N, K]`` (plain, dist tensor or ShardedWeight).
    :ivar scales: float32 ``[]``/``[1]`` per tensor, ``[..., N, 1]`` per channel or
        ``[..., ceil(N/bn), ceil(K/bk)]`` per block; value = values * scale.
    :ivar global_scale: reserved for NVFP4 (not in this slice): must be None.
    :ivar block: ``(bn, bk)`` only to broadcast a per-tensor checkpoint scale into a
        block grid; otherwise the block is the checkpoint's own.
    """

    values: Any
    scales: Any
    global_scale: Any = None
    block: tuple[int, int] | None = None


@dataclass(frozen=True)
class KeptPiece:
    """One checked kept target: what to read and where it goes."""

    key: str
    values: Target
    scales: Target
    values_key: str
    scale_key: str
    #: the checkpoint's block over the values' last two dims (leading dims: 1).
    block: tuple[int, ...]
    #: the target scale grid's block (the checkpoint's, or the broadcast one).
    target_block: tuple[int, ...]
    per_tensor: bool


def split(flat: dict[Any, Any]) -> tuple[dict[str, QuantizedTarget], dict[Any, Any]]:
    """The kept targets of a flattened state dict, and everything else."""
    kept = {k: v for k, v in flat.items() if isinstance(v, QuantizedTarget)}
    rest = {k: v for k, v in flat.items() if not isinstance(v, QuantizedTarget)}
    for k in kept:
        if not isinstance(k, str):
            raise TargetError(f"kept target {k!r}: key a QuantizedTarget by its logical name")
    return kept, rest


def plan(ct: ComposedTransform, kept: dict[str, QuantizedTarget]) -> list[KeptPiece]:
    """Check every kept target against the checkpoint (no file is read)."""
    return [_plan_one(ct, key, qt) for key, qt in sorted(kept.items())]


def _part(key: str, name: str, part: Any) -> Target:
    found = describe({key: part})
    if len(found) != 1:
        raise TargetError(f"kept target {key!r}: its {name} must be one tensor on this rank")
    return found[0]


def _plan_one(ct: ComposedTransform, key: str, qt: QuantizedTarget) -> KeptPiece:
    if qt.global_scale is not None:
        raise TargetError(
            f"kept target {key!r}: global_scale is for NVFP4 kept forms, not loaded yet; "
            "pass None for FP8"
        )
    if key not in ct.entries:
        raise TargetError(f"kept target {key!r}: the checkpoint has no logical tensor of that name")
    entry = ct.entries[key]
    tensors = ct.checkpoint.tensors
    dtypes = [tensors[s].dtype for s in entry.sources]
    if len(entry.sources) != 2 or dtypes[0] != "F8_E4M3" or dtypes[1] not in _EXACT_SCALES:
        raise TargetError(
            f"kept target {key!r}: the checkpoint stores it as {dtypes} ({entry.owner}); "
            f"the FP8 kept form needs an F8_E4M3 weight with an F32/BF16/F16 scale"
        )
    values_key, scale_key = entry.sources
    shape = tuple(tensors[values_key].shape)
    values = _part(key, "values", qt.values)
    scales = _part(key, "scales", qt.scales)
    if values.dtype != "float8_e4m3fn" or values.global_shape != shape:
        raise TargetError(
            f"kept target {key!r}: values must be float8_e4m3fn of shape {list(shape)}, "
            f"not {values.dtype} {list(values.global_shape)}"
        )
    if scales.dtype != "float32":
        raise TargetError(f"kept target {key!r}: scales must be float32, not {scales.dtype}")
    block, per_tensor = _checkpoint_block(ct, key, shape, scale_key)
    target_block = _target_block(key, shape, block, per_tensor, scales, qt.block)
    _check_aligned(key, shape, values, block, "the checkpoint's block")
    _check_aligned(key, shape, values, target_block, "the target's block")
    _check_scale_box(key, shape, values, scales, target_block, per_tensor)
    return KeptPiece(key, values, scales, values_key, scale_key, block, target_block, per_tensor)


def _checkpoint_block(
    ct: ComposedTransform, key: str, shape: tuple[int, ...], scale_key: str
) -> tuple[tuple[int, ...], bool]:
    """The checkpoint's block over ``shape``, and whether it is one per-tensor scale."""
    scale_shape = tuple(ct.checkpoint.tensors[scale_key].shape)
    lead = (1,) * (len(shape) - 2)
    if math.prod(scale_shape) == 1:
        return tuple(shape), True
    if scale_shape in (shape[:-1], (*shape[:-1], 1)):
        return (*lead, 1, shape[-1]), False
    declared = ct.checkpoint.quantization_config.get("weight_block_size")
    if isinstance(declared, list) and len(declared) == 2:
        block = (*lead, int(declared[0]), int(declared[1]))
        if _grid(shape, block) == scale_shape:
            return block, False
    raise TargetError(
        f"kept target {key!r}: scale {scale_key!r} {list(scale_shape)} is no per-tensor, "
        "per-channel or declared block grid over the weight; it cannot be kept exactly"
    )


def _target_block(
    key: str,
    shape: tuple[int, ...],
    block: tuple[int, ...],
    per_tensor: bool,
    scales: Target,
    asked: tuple[int, int] | None,
) -> tuple[int, ...]:
    lead = (1,) * (len(shape) - 2)
    if per_tensor and asked is not None:
        return (*lead, *asked)
    if asked is not None and (*lead, *asked) != block:
        raise TargetError(
            f"kept target {key!r}: block={asked} differs from the checkpoint's block "
            f"{list(block[-2:])}; block= only broadcasts a per-tensor scale"
        )
    if per_tensor and math.prod(scales.global_shape) == 1:
        return block
    if per_tensor and scales.global_shape == (*shape[:-1], 1):
        return (*lead, 1, shape[-1])  # an exact broadcast into per-channel
    return block


def _check_aligned(
    key: str, shape: tuple[int, ...], values: Target, block: tuple[int, ...], what: str
) -> None:
    """vLLM's validate_fp8_block_shape rule: a shard starts on a block boundary and ends
    on one or at the tensor's end."""
    for d, (o, n, b, s) in enumerate(
        zip(values.offset, values.local_shape, block, shape, strict=True)
    ):
        if o % b or ((o + n) % b and o + n != s):
            raise TargetError(
                f"kept target {key!r}: the values shard at offset {list(values.offset)} "
                f"(shape {list(values.local_shape)}) cuts {what} {list(block)} along dim {d}; "
                "shard FP8 weights on block boundaries"
            )


def _grid(shape: tuple[int, ...], block: tuple[int, ...]) -> tuple[int, ...]:
    """The scale grid of ``block`` over ``shape`` (a partial last block counts)."""
    return tuple(ceil_div(s, b) for s, b in zip(shape, block, strict=True))


def _grid_box(values: Target, block: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The offset and shape, in the scale grid of ``block``, of the blocks covering the shard."""
    start = tuple(o // b for o, b in zip(values.offset, block, strict=True))
    end = tuple(
        ceil_div(o + n, b) for o, n, b in zip(values.offset, values.local_shape, block, strict=True)
    )
    return start, tuple(e - s for s, e in zip(start, end, strict=True))


def _check_scale_box(
    key: str,
    shape: tuple[int, ...],
    values: Target,
    scales: Target,
    block: tuple[int, ...],
    per_tensor: bool,
) -> None:
    if per_tensor and block == shape:
        if math.prod(scales.global_shape) != 1 or scales.global_shape not in ((), (1,)):
            raise TargetError(
                f"kept target {key!r}: a per-tensor scale needs scales of shape [] or [1] "
                f"(or block=(bn, bk) to broadcast it), not {list(scales.global_shape)}"
            )
        return
    grid = _grid(shape, block)
    offset, local = _grid_box(values, block)
    if (scales.global_shape, scales.offset, scales.local_shape) != (grid, offset, local):
        raise TargetError(
            f"kept target {key!r}: scales must be the grid {list(grid)} of block {list(block)}, "
            f"this shard holding offset {list(offset)} shape {list(local)}; got "
            f"{list(scales.global_shape)} at {list(scales.offset)} shape {list(scales.local_shape)}"
        )


@dataclass(frozen=True)
class KeptRead:
    """One kept target's read boxes: the values' bytes and the float32 scales."""

    piece: KeptPiece
    values: np.ndarray
    scales: np.ndarray


def read(ct: ComposedTransform, pieces: list[KeptPiece]) -> list[KeptRead]:
    """Read each piece's values box and the scale blocks covering it."""
    return [KeptRead(p, _read_values(ct, p), _read_scales(ct, p)) for p in pieces]


def _read_values(ct: ComposedTransform, p: KeptPiece) -> np.ndarray:
    return ct.checkpoint.read(p.values_key, p.values.offset, p.values.local_shape)


def _read_scales(ct: ComposedTransform, p: KeptPiece) -> np.ndarray:
    info = ct.checkpoint.tensors[p.scale_key]
    stored = tuple(info.shape)
    if p.per_tensor:
        raw = ct.checkpoint.read(p.scale_key)
    else:
        offset, local = _grid_box(p.values, p.block)
        if stored != _grid(p.values.global_shape, p.block):
            # per-channel stored as (out,): the covering box minus its last dim.
            raw = ct.checkpoint.read(p.scale_key, offset[: len(stored)], local[: len(stored)])
            raw = raw.reshape(local)
        else:
            raw = ct.checkpoint.read(p.scale_key, offset, local)
    f32 = _widen(raw, info.dtype)
    if p.per_tensor:
        return np.broadcast_to(f32.reshape(()), p.scales.local_shape).copy()
    return f32.reshape(p.scales.local_shape)


def _widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Stored scale bits as float32: exact for every dtype of :data:`_EXACT_SCALES`."""
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


def write(reads: list[KeptRead]) -> None:
    """Copy each read into its parts' tensors (the checks have all passed)."""
    import paddle

    for r in reads:
        bytes_ = paddle.to_tensor(np.ascontiguousarray(r.values)).view(paddle.float8_e4m3fn)
        _assign(r.piece.values, bytes_.to(r.piece.values.tensor.place))
        _assign(r.piece.scales, paddle.to_tensor(r.scales).to(r.piece.scales.tensor.place))


def _assign(target: Target, value: Any) -> None:
    if target.lazy:
        target.tensor.set_value(value)
    else:
        target.tensor.copy_(value.reshape(list(target.local_shape)), False)
