"""Reading kept targets: their scales checked and converted before the first write, then
their values, the checkpoint's own bytes, written one target at a time.

For :func:`flexq.load_state_dict` (through :mod:`flexq.load.api`), on pieces that
:func:`flexq.load.kept.plan` checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from flexq.errors import TargetError
from flexq.load.kept_forms import KeptForm, grid_box, reciprocal_global
from flexq.numerics.ops import ops_for
from flexq.numerics.scales import check_scales, scale_to_float32

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.load.kept import KeptPiece
    from flexq.load.kept_boxes import KeptBox
    from flexq.load.targets import Target


@dataclass(frozen=True)
class KeptScales:
    """One kept target's scales, read, checked and converted to the parts' dtypes."""

    piece: KeptPiece
    scales: np.ndarray
    global_scale: np.ndarray | None


def check(ct: Composition, pieces: list[KeptPiece]) -> list[KeptScales]:
    """Read the scale blocks covering each piece's values shard, check them as the
    dequantizing path does (:func:`flexq.formatkit.check_scales`) and convert them
    exactly: the data checks of kept targets, run before the load's first write."""
    return [_check_one(ct, p) for p in pieces]


def _check_one(ct: Composition, p: KeptPiece) -> KeptScales:
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
        at, _ = grid_box(box.at, box.dst_shape, p.target_block)
        place = tuple(
            slice(a - o, a - o + n)
            for a, o, n in zip(at, p.scales.offset, scales.shape, strict=True)
        )
        out[place] = scales
    return KeptScales(p, out, _global(ct, p, raws))


def _box_scales(ct: Composition, p: KeptPiece, box: KeptBox) -> tuple[np.ndarray, np.ndarray]:
    """One box's stored scales, checked and converted (in the target's orientation), and
    the stored scale bytes."""
    form = box.form
    raw, box_offset = _read_scales(ct, box)
    info = ct.checkpoint.info(form.scale_key)
    f32 = np.asarray(scale_to_float32(ops_for(raw), raw, info.dtype))
    check_scales(f32, scale=info, logical_key=form.key, format_name=form.owner, offset=box_offset)
    scales = _convert_scales(p, form, raw, f32, info.dtype)
    return (np.swapaxes(scales, -1, -2) if box.transposed else scales), raw


def _read_scales(ct: Composition, box: KeptBox) -> tuple[np.ndarray, tuple[int, ...]]:
    """The stored scale box covering a values box, and its offset in the stored tensor."""
    form = box.form
    stored = form.grid
    if form.per_tensor:
        return ct.checkpoint.read(form.scale_key), (0,) * len(stored)
    offset, local = grid_box(box.offset, box.shape, form.block)
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


def _global(ct: Composition, p: KeptPiece, raws: list[np.ndarray]) -> np.ndarray | None:
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


def write(ct: Composition, checked: list[KeptScales]) -> None:
    """Read each piece's values boxes and write them with its scales, one piece at a time
    (every check has passed), so memory above the targets stays near one piece."""
    for c in checked:
        p = c.piece
        _assign(p.values, _values(ct, p))
        _assign(p.scales, c.scales)
        if p.global_scale is not None and c.global_scale is not None:
            _assign(p.global_scale, c.global_scale)


def _values(ct: Composition, p: KeptPiece) -> np.ndarray:
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
