"""The one definition of the dequantization: ``W = (q - zp) * s`` in float32.

The ``decode`` of the ``ct-int`` :class:`flexq.formatkit.Format`. ``q`` is the signed code
(pack-quantized stores ``q + 2^(bits-1)``, so with the stored code ``c``
and stored zero point ``zc`` -- offset alike -- ``W = (c - zc) * s``;
int-quantized stores ``q`` itself in I8). Every step is exact: codes and zero
points are small integers, their difference has at most 9 significant bits,
and its product with an F16/BF16 scale fits float32's 24; an F32 scale rounds
the product once, identically on both paths. The core then rounds once to the
output dtype, which is what compressed-tensors' own ``dequantize`` gives (it
computes ``(q - zp) * s`` in the scale's dtype: one rounding of the same exact
product).

Two paths compute the same bits: numpy decodes bands of output rows on the
worker threads (the kit's byte-table :func:`flexq.formatkit.unpack_into` into the
output, then the affine step in cache); Paddle tensors go through
:class:`flexq.formatkit.ArrayOps` (the kit's ``unpack_codes``) and
:mod:`flexq_ct_int.arrayops` (act-order columns) on their device. Source boxes may be
larger than the target (covering words, groups, or whole tensors for a global plan):
positions inside them come from the plan's box offsets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq import Checkpoint, FormatError, ReadPlan, block_cover
from flexq.formatkit import (
    ArrayOps,
    decode_in_row_bands,
    ops_for,
    to_numpy,
    unpack_into,
)
from flexq.formatkit.words import unpack_less_zeros
from flexq_ct_int.arrayops import CtOps, ct_ops_for
from flexq_ct_int.config import FORMAT_NAME

if TYPE_CHECKING:
    from flexq.formatkit import BoxSources
    from flexq_ct_int.layout import CtLinear


@dataclass(frozen=True)
class _Affine:
    """Per-row scales and zero points of a target box, and how columns map to groups.

    :ivar scale: ``[no or 1, G]`` float32, one column per group covering the box.
    :ivar zero: the same shape, or a number (no zero point: the code offset).
    :ivar mode: ``"one"`` (a single group column), ``"groups"`` (the box is whole
        groups of ``width``), ``"spread"`` (groups of ``width``, the box starting
        ``start`` columns into the first), ``"index"`` (act-order: ``index``).
    """

    scale: Any
    zero: Any
    mode: str
    width: int
    start: int
    index: Any


def decode(linear: CtLinear, sources: BoxSources, out: Any = None) -> Any:
    """The format's ``decode``: the float32 box ``sources.target`` of ``linear``'s weight.

    :raises FormatError: naming the file when a source arrived in another shape than
        its plan box, or ``g_idx`` names a group that does not exist (the core has
        run :func:`check_metadata` before: a load fails there before any write).
    """
    ckpt, plan = sources.checkpoint, sources.plan
    boxes = {key: shape for key, (_, shape) in plan.source_slices.items()}
    sources.expect(boxes, logical_key=linear.key, format_name=FORMAT_NAME)
    try:
        return _dequantize(linear, sources, plan, out, sources.rounded_out)
    except FormatError as exc:
        raise FormatError(f"{ckpt.info(linear.weight_key).file}: {exc}") from None


def check_metadata(linear: CtLinear, sources: BoxSources) -> None:
    """The plan's check, run by the core before the first write of a load on the planned
    ``weight_shape`` and ``weight_g_idx`` boxes: the recorded shape is the headers', and
    every group index names a group (what the decoder would otherwise find mid-load)."""
    ckpt = sources.checkpoint
    if linear.shape_key is not None:
        _check_shape(ckpt, linear.shape_key, sources[linear.shape_key], linear.shape)
    if linear.gidx_key is not None:
        gidx = sources[linear.gidx_key]
        try:
            _group_index(linear, sources, sources.plan, ct_ops_for(gidx))
        except FormatError as exc:
            raise FormatError(f"{ckpt.info(linear.gidx_key).file}: {exc}") from None


def _check_shape(ckpt: Checkpoint, key: str, value: Any, shape: tuple[int, int]) -> None:
    """``weight_shape`` must say what the headers said."""
    recorded = tuple(int(v) for v in np.asarray(to_numpy(value)).reshape(-1))
    if recorded != shape:
        raise FormatError(
            f"{ckpt.info(key).file}: tensor {key!r} says {recorded}, but the packed weight "
            f"and its scales hold {shape} (format {FORMAT_NAME!r})"
        )


def _dequantize(
    linear: CtLinear,
    sources: Mapping[str, Any],
    plan: ReadPlan,
    out: Any,
    rounded: np.ndarray | None = None,
) -> Any:
    weight = sources[linear.weight_key]
    ops, ct = ops_for(weight), ct_ops_for(weight)
    (o0, i0), (no, ni) = plan.target.global_offset, plan.target.local_shape
    (wr0, wc0), _ = plan.source_slices[linear.weight_key]
    ri, ci = o0 - wr0, i0 - wc0 * linear.per_word
    if no == 0 or ni == 0:
        return ct.zeros((no, ni), weight)
    affine = _affine(linear, sources, plan, ops, ct)
    # Where code i0 starts in the box's first word (the box is whole words).
    first_bit = int(linear.packing.bit_of(np.array(i0))) - 32 * wc0 if linear.packed else 0
    if isinstance(weight, np.ndarray):
        if out is None or not (out.flags.c_contiguous and out.dtype == np.float32):
            out = np.empty((no, ni), np.float32)
        box = np.ascontiguousarray(weight)
        return _banded(linear, box, ri, ci, first_bit, affine, out, rounded)
    if linear.packed:
        codes = ops.unpack_codes(weight, linear.bits, ni, first_bit, _per_word(linear))
        codes = codes[ri : ri + no]
    else:
        codes = ops.float32(weight, "I8")[ri : ri + no, ci : ci + ni]
    scale, zero = _spread(affine, ops, ct, ni)
    return (codes - zero) * scale


def _affine(
    linear: CtLinear, sources: Mapping[str, Any], plan: ReadPlan, ops: ArrayOps, ct: CtOps
) -> _Affine:
    (o0, i0), (no, ni) = plan.target.global_offset, plan.target.local_shape
    b0, b1 = linear.block
    scale = ops.float32(sources[linear.scale_key], linear.scale_dtype)
    if len(linear.scale_shape) == 2:
        sr0, sc0 = plan.source_slices[linear.scale_key][0]
    else:
        sr0, sc0 = 0, 0
        scale = ops.reshape(scale, (1, 1))
    s_rows = _rows(ops, scale, sr0, o0, no, b0)
    zero: Any = float(linear.code_offset)
    zc0 = sc0
    if linear.zero == "packed":
        assert linear.zero_key is not None
        zr0, zc0 = plan.source_slices[linear.zero_key][0]
        # Packed along out: one zero row per weight row (group and channel strategies).
        words = sources[linear.zero_key]
        if linear.packing.aligned:
            start = o0 - zr0 * linear.per_word
            # Packed along out: the kit's transposed unpack of the words' transpose.
            slots = range(linear.per_word)
            zero = ops.unpack(ops.transpose(words), linear.bits, slots, True)[start : start + no]
        else:
            first = int(linear.packing.bit_of(np.array(o0))) - 32 * zr0
            codes = ops.unpack_codes(
                ops.transpose(words), linear.bits, no, first, _per_word(linear)
            )
            zero = ops.transpose(codes)
    elif linear.zero == "raw":
        assert linear.zero_key is not None
        assert linear.zero_dtype is not None
        z = ops.float32(sources[linear.zero_key], linear.zero_dtype)
        z = ops.reshape(z, tuple(int(d) for d in scale.shape)) + float(linear.code_offset)
        zero = _rows(ops, z, sr0, o0, no, b0)
    index = _group_index(linear, sources, plan, ct)
    if index is not None:
        if sc0 or zc0:
            raise FormatError(
                f"act-order plan for {linear.key!r} must read every group (format {FORMAT_NAME!r})"
            )
        return _Affine(s_rows, zero, "index", b1, 0, index)
    first = i0 // b1
    ng = block_cover(i0, ni, b1, linear.in_features)[1]
    s_rows = s_rows[:, first - sc0 : first - sc0 + ng]
    if not isinstance(zero, float):
        zero = zero[:, first - zc0 : first - zc0 + ng]
    start = i0 - first * b1
    if ng == 1:
        mode = "one"
    elif start == 0 and ni == ng * b1:
        mode = "groups"
    else:
        mode = "spread"
    return _Affine(s_rows, zero, mode, b1, start, None)


def _per_word(linear: CtLinear) -> int | None:
    """The kit unpacker's ``per_word``: None for one dense stream (any width from
    compressed-tensors 0.18 on, and widths dividing 8 in every release)."""
    return None if linear.packing.dense else linear.per_word


def _rows(ops: ArrayOps, x: Any, r0: int, o0: int, no: int, b0: int) -> Any:
    """Rows ``o0..o0+no`` of the weight's per-row values from grid rows starting at ``r0``."""
    if int(x.shape[0]) == 1:
        return x  # one row block: broadcasts over every row
    if b0 == 1:
        return x[o0 - r0 : o0 - r0 + no]
    start = o0 - r0 * b0
    return ops.repeat(x, b0, 0)[start : start + no]


def _group_index(linear: CtLinear, sources: Mapping[str, Any], plan: ReadPlan, ct: CtOps) -> Any:
    """Act-order: the group of each target column, checked; None for column order."""
    if linear.gidx_key is None:
        return None
    raw = sources[linear.gidx_key]
    values = to_numpy(raw).astype(np.int64)
    if values.size and (values == -1).all():
        return None  # compressed-tensors: an uninitialised g_idx (-1) means column order
    groups = linear.scale_grid[1]
    bad = (values < 0) | (values >= groups)
    if bad.any():
        at = int(np.argmax(bad)) + plan.source_slices[linear.gidx_key][0][0]
        raise FormatError(
            f"tensor {linear.gidx_key!r}: entry {at} is {int(values[bad][0])}, "
            f"not a group index in 0..{groups - 1} (format {FORMAT_NAME!r})"
        )
    return values if isinstance(raw, np.ndarray) else ct.as_index(raw)


def _spread(affine: _Affine, ops: ArrayOps, ct: CtOps, ni: int) -> tuple[Any, Any]:
    """Scale and zero point spread over the box's columns (or broadcastable to them)."""
    s, z = affine.scale, affine.zero
    if affine.mode == "one":
        return s, z
    if affine.mode == "index":
        s = ct.take_columns(s, affine.index)
        return s, z if isinstance(z, float) else ct.take_columns(z, affine.index)
    a, w = affine.start, affine.width
    s = ops.repeat(s, w, 1)[:, a : a + ni]
    return s, z if isinstance(z, float) else ops.repeat(z, w, 1)[:, a : a + ni]


def _banded(
    linear: CtLinear,
    weight: np.ndarray,
    ri: int,
    ci: int,
    first_bit: int,
    affine: _Affine,
    out: np.ndarray,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """The numpy path: bands of output rows decoded and scaled while in cache, on the
    worker threads; packed codes are unpacked straight into ``out`` by the kit's one
    unpacker (:func:`unpack_into`, from ``first_bit`` of each row's first word). With
    ``rounded`` (``BoxSources.rounded_out``) each band is rounded into it while in cache
    instead (:func:`flexq.formatkit.decode_in_row_bands`), which is returned."""
    no, ni = out.shape
    per_row = int(weight.shape[1]) * linear.per_word
    aligned = linear.packed or (ci == 0 and ni == per_row)
    per_word = _per_word(linear)
    scale = np.asarray(affine.scale, dtype=np.float32)
    index = None if affine.index is None else np.asarray(affine.index)
    # Without a zero point the code offset goes into the lookup table: one pass less.
    minus, zero = 0.0, None
    if isinstance(affine.zero, float):
        minus = affine.zero
    else:
        zero = np.asarray(affine.zero, np.float32)

    def decode(rows: slice, dst: np.ndarray) -> None:
        src = weight[ri + rows.start : ri + rows.stop]
        if linear.packed:
            unpack_into(src, linear.bits, dst, minus, first_bit=first_bit, per_word=per_word)
        else:
            # I8 codes: a conversion, several times faster than a table lookup.
            np.copyto(dst, src.view(np.int8), casting="unsafe")
            if minus:
                dst -= np.float32(minus)  # small integers: exact

    def part(x: Any, rows: slice) -> Any:
        if x is None or x.shape[0] == 1:
            return x
        return x[rows]

    # Zero points per whole group of a dense stream come off the unpacked bytes.
    dense = linear.packed and per_word is None and first_bit == 0
    less_zeros = dense and zero is not None and affine.mode == "groups"

    def work(run: range, dst: np.ndarray) -> None:
        rows = slice(run.start, run.stop)
        if less_zeros:
            assert zero is not None
            src = weight[ri + rows.start : ri + rows.stop]
            unpack_less_zeros(src, linear.bits, dst, part(zero, rows))
            with np.errstate(invalid="ignore", over="ignore"):
                _apply(dst, part(scale, rows), None, affine, index)
            return
        if aligned:
            decode(rows, dst)
        else:
            full = np.empty((len(run), per_row), np.float32)
            decode(rows, full)
            dst[...] = full[:, ci : ci + ni]
        s, z = part(scale, rows), part(zero, rows)
        with np.errstate(invalid="ignore", over="ignore"):
            _apply(dst, s, z, affine, index)

    return decode_in_row_bands(work, (no, ni), out, rounded)


def _apply(dst: np.ndarray, s: Any, z: Any, affine: _Affine, index: np.ndarray | None) -> None:
    """``dst = (dst - z) * s`` in place (no ``z``: ``dst *= s``), per group of the mode."""
    if affine.mode == "one":
        if z is not None:
            dst -= z
        dst *= s
        return
    if affine.mode == "groups":
        groups = dst.reshape(dst.shape[0], -1, affine.width)
        if z is not None:
            groups -= z[:, :, None]
        groups *= s[:, :, None]
        return
    if affine.mode == "index":
        assert index is not None
        if z is not None:
            dst -= z[:, index]
        dst *= s[:, index]
        return
    a, w, n = affine.start, affine.width, dst.shape[1]
    if z is not None:
        dst -= np.repeat(z, w, axis=1)[:, a : a + n]
    dst *= np.repeat(s, w, axis=1)[:, a : a + n]
