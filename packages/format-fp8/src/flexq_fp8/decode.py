"""The one definition of FP8 dequantization: ``decode(q) * scale`` in float32.

Written once against :mod:`flexq.formatkit`, so the same code runs on numpy arrays
(CPU reads) and on Paddle tensors on their device (only the uint8 codes and the
small scale grid cross the bus). Every step is exact: table lookups, repeats,
slices and one float32 product per element; the core then rounds once to the
output dtype. :func:`decode` is the format's decode (:data:`flexq_fp8.plugin.plugin`);
:func:`dequantize` is the math (also timed by the bench).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.formatkit import (
    E4M3_TO_FLOAT32,
    ArrayOps,
    BoxSources,
    lookup_into,
    lookup_rounded,
    ops_for,
    run_in_bands,
    run_in_bands_rounded,
    scale_to_float32,
)
from flexq_fp8.config import FORMAT_NAME

if TYPE_CHECKING:
    from flexq_fp8.layout import Fp8Layout


def decode(layout: Fp8Layout, sources: BoxSources, out: Any) -> Any:
    """The format's ``decode``: checks that the weight and scale boxes are the ones the
    target needs (the core has checked that the declared scales are finite), then
    :func:`dequantize`.

    :raises FormatError: on a source box of the wrong shape.
    """
    key, target = layout.weight_key, sources.target
    grid_box = layout.grid_cover(target.global_offset, target.local_shape)
    want = {key: target.local_shape, layout.scale_key: layout.scale_box(*grid_box)[1]}
    sources.expect(want, logical_key=key, format_name=FORMAT_NAME)
    weight, scale = sources[key], sources[layout.scale_key]
    return dequantize(
        layout, weight, scale, target.global_offset, target.local_shape, out, sources.rounded_out
    )


def dequantize(
    layout: Fp8Layout,
    weight: Any,
    scale: Any,
    offset: Sequence[int],
    shape: Sequence[int],
    out: Any = None,
    rounded_out: np.ndarray | None = None,
) -> Any:
    """The box ``offset`` + ``shape`` of the logical weight as float32, or, when
    ``rounded_out`` is given and the codes are a C-contiguous numpy box, as its bfloat16
    bits in ``rounded_out``: what rounding the float32 gives (one scale over the box:
    :func:`flexq.formatkit.lookup_rounded`; else each band rounded while in cache,
    :func:`flexq.formatkit.run_in_bands_rounded`).

    :param weight: exactly that box of the F8 weight (uint8 codes).
    :param scale: the stored-scale box :meth:`Fp8Layout.scale_box` names for
        the grid blocks covering the box.
    :param out: optional C-contiguous float32 numpy array of ``shape`` to fill.
    :param rounded_out: optional C-contiguous uint16 array of ``shape`` (a bfloat16
        target's memory, ``BoxSources.rounded_out``).
    """
    # One scale over the box (a per-tensor scale, or a box inside one block): the
    # bfloat16 target is filled straight from its 256 codes' rounded products.
    one = isinstance(weight, np.ndarray) and isinstance(scale, np.ndarray) and scale.size == 1
    if rounded_out is not None and one:
        s = scale_to_float32(ops_for(scale), scale, layout.scale_dtype).reshape(-1)[0]
        return lookup_rounded(E4M3_TO_FLOAT32, weight, s, rounded_out)
    ops = ops_for(weight)
    if 0 in tuple(shape):
        return ops.lut(E4M3_TO_FLOAT32, weight)  # an empty box has no scale blocks
    # Only codes every part of the box can band may round in bands: a box half rounded
    # and half float32 would be no result at all.
    banded = isinstance(weight, np.ndarray) and weight.dtype == np.uint8
    rounded = rounded_out if banded and weight.flags.c_contiguous else None
    grid_offset, grid_shape = layout.grid_cover(offset, shape)
    s = ops.reshape(scale_to_float32(ops, scale, layout.scale_dtype), grid_shape)
    last = len(shape) - 1
    if isinstance(weight, np.ndarray) and last == 1 and grid_shape[0] > 1 < layout.block[0]:
        # A 2-D weight with row blocks (DeepSeek-style 128x128): spread the scales
        # along the columns only (one row per block row, small) and let each block
        # row's scale row broadcast over its rows, so numpy multiplies whole
        # contiguous rows instead of 128-element pieces.
        b1, g1 = layout.block[1], grid_shape[1]
        if g1 > 1 and b1 > 1:
            start = offset[1] - grid_offset[1] * b1
            s = ops.repeat(s, b1, axis=1)[:, start : start + shape[1]]
        return _by_block_rows(
            weight, s, offset[0] - grid_offset[0] * layout.block[0], layout.block[0], out, rounded
        )
    for d, (o, n, b, g) in enumerate(zip(offset, shape, layout.block, grid_shape, strict=True)):
        start = o - grid_offset[d] * b
        # One block along d broadcasts by itself; blocks of one element already
        # line up with the box.
        if g <= 1 or b <= 1:
            continue
        if d == last and start == 0 and n == g * b:
            # The box is whole blocks along the last dim: view the codes as
            # [..., g, b] and broadcast the scales instead of spreading them
            # over a full-size float32 array.
            split = (*tuple(shape[:-1]), g, b)
            values = decode_scaled(
                ops,
                ops.reshape(weight, split),
                ops.reshape(s, (*tuple(s.shape), 1)),
                out=None if out is None else out.reshape(split),
                rounded=None if rounded is None else rounded.reshape(split),
            )
            return ops.reshape(values, tuple(shape))
        # Spread each scale over its block and cut out the box, which may start
        # and end inside a block.
        s = ops.repeat(s, b, axis=d)[(slice(None),) * d + (slice(start, start + n),)]
    return decode_scaled(ops, weight, s, out=out, rounded=rounded)


def _by_block_rows(
    weight: np.ndarray,
    s: np.ndarray,
    start: int,
    block: int,
    out: np.ndarray | None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """``decode(weight) * s`` with row ``r`` of the box scaled by ``s[(r + start) // block]``
    (into ``rounded`` as bfloat16 bits when given, see :func:`decode_scaled`).

    ``s`` holds one row of scales per block row (spread over the columns, or one
    column). The box may start and end inside a block row: those partial block
    rows are done alone, the whole ones in a single call viewed as
    ``[blocks, block, cols]``.
    """
    rows, cols = weight.shape
    result = rounded
    if result is None:
        result = out = np.empty(weight.shape, dtype=np.float32) if out is None else out
    head = min(rows, block - start) if start else 0
    whole = (rows - head) // block
    mid = head + whole * block
    ops = ops_for(weight)
    first = 1 if head else 0

    def part(rows_of: slice, scale: np.ndarray, split: tuple[int, ...] | None = None) -> None:
        def cut(x: np.ndarray | None) -> np.ndarray | None:
            return None if x is None else x[rows_of] if split is None else x[rows_of].reshape(split)

        decode_scaled(ops, cut(weight), scale, out=cut(out), rounded=cut(rounded))

    if head:
        part(slice(None, head), s[:1])
    if whole:
        split = (whole, block, cols)
        part(slice(head, mid), s[first : first + whole].reshape(whole, 1, s.shape[1]), split)
    if mid < rows:
        tail = first + whole
        part(slice(mid, None), s[tail : tail + 1])
    return result


def decode_scaled(
    ops: ArrayOps, codes: Any, scale: Any, out: Any = None, rounded: np.ndarray | None = None
) -> Any:
    """``E4M3(codes) * scale`` in float32, ``scale`` broadcast (each dim 1 or equal).

    numpy codes are decoded band by band with integer arithmetic where it is
    exact (see :func:`_scaled_band`), else with the core's table lookup; Paddle
    tensors use the table lookup on their device. ``rounded`` (C-contiguous uint16 of
    the codes' shape, for C-contiguous numpy uint8 codes only) receives the bfloat16
    bits of that float32 instead, each band rounded while in cache, and is returned.
    """
    bandable = (
        isinstance(codes, np.ndarray)
        and codes.dtype == np.uint8
        and codes.ndim > 0
        and codes.flags.c_contiguous
        and np.ndim(scale) <= codes.ndim
    )
    if bandable and rounded is not None:
        scales = np.asarray(scale, dtype=np.float32)
        return run_in_bands_rounded(_scaled_band, codes, rounded, scales)
    if not bandable or not (out is None or (out.dtype == np.float32 and out.flags.c_contiguous)):
        return ops.lut_mul(E4M3_TO_FLOAT32, codes, scale, out=out)
    if out is None:
        out = np.empty(codes.shape, np.float32)
    return run_in_bands(_scaled_band, codes, out, np.asarray(scale, dtype=np.float32))


#: 2^120 as float32: E4M3 bits placed in a float32's exponent and mantissa fields
#: read as the E4M3 value times 2^-120 (normals and subnormals alike).
_TWO_120 = np.float32(2.0**120)
#: The float32 bits of an E4M3 byte shifted left by 20: its sign (bit 31, copied
#: there by sign extension) and its 7 exponent-and-mantissa bits (26..20).
_SIGN_AND_BITS = np.int32(-0x78100000)  # 0x87F00000


def _scaled_band(codes: np.ndarray, out: np.ndarray, scale: np.ndarray) -> None:
    """One band of :func:`decode_scaled`, with the output's memory as the work space.

    A byte ``b`` moved to bits 20..27 of a float32 (sign to bit 31) is the float32
    ``E4M3(b) * 2^-120`` exactly, so ``E4M3(b) * s`` is that times ``s * 2^120``:
    the same exact product, rounded once the same way. Integer passes replace the
    table gather. It needs ``s * 2^120`` to be finite (``|s| < 2^8``) and no NaN
    code (0x7F, 0xFF) in the band; otherwise the band uses the table.
    """
    if not (np.abs(scale) < 256).all() or (codes & 0x7F).max() == 0x7F:
        lookup_into(E4M3_TO_FLOAT32, codes, out)
        with np.errstate(over="ignore", invalid="ignore"):
            out *= scale
        return
    bits = out.view(np.int32)
    np.copyto(bits, codes.view(np.int8), casting="unsafe")  # sign-extends bit 7
    bits <<= 20
    bits &= _SIGN_AND_BITS
    _scale_rows(out, scale * _TWO_120)


#: Elements an inner multiply loop covers when a scale row is repeated (see _scale_rows).
_ROW_RUN = 1 << 14


def _scale_rows(out: np.ndarray, scale: np.ndarray) -> None:
    """``out *= scale`` (broadcast). A band of 2-D rows with one scale row ``[1, n]`` (a
    block row's scales spread over its columns) is the common case, and numpy runs a
    broadcast product one row at a time (an inner-loop call per row: ~1.6x the time of
    a plain product on a band of 4096-wide rows); there the scale row is repeated ``k``
    times and ``out`` viewed as rows ``k`` times as long, so each call covers about
    :data:`_ROW_RUN` elements. The products are the same ones."""
    rows = out.shape[0] if out.ndim == 2 else 0
    if rows > 1 and scale.shape == (1, out.shape[1]) and out.flags.c_contiguous:
        k = max(1, min(rows, _ROW_RUN // max(1, out.shape[1])))
        while rows % k:
            k -= 1
        if k > 1:
            wide = out.reshape(rows // k, k * out.shape[1])
            np.multiply(wide, np.tile(scale, (1, k)), out=wide)
            return
    np.multiply(out, scale, out=out)
