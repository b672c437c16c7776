"""The Quark dequantization, written once for numpy arrays and Paddle tensors.

:func:`decode` is the format's decode. Every scheme is Quark's own
definition computed in float32 with the kit's exact element tables and ops
(the core then rounds once to the output dtype):

- FP8: ``E4M3(q) * s`` (``dequantize_fp8_per_tensor_with_scale`` /
  ``..._per_channel_...``; per tensor into a bfloat16 target, the 256 products rounded
  once and looked up straight into it: ``lookup_rounded``);
- int4/uint4 per group: ``(q - z) * s`` (``dequantize_int_per_group_affine``).
  int4 codes and zeros are two's complement nibbles: flipping each nibble's top
  bit maps a signed code c to c + 8, and the offsets cancel in ``q - z``, so
  both are unpacked as unsigned codes after the flip (exact small integers);
- MXFP4: ``E2M1(q) * 2^(e - 127)``. (Quark computes an E8M0 255 as 2^128 = inf;
  flexq follows the OCP definition, NaN, and warns about the non-finite scale.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.formatkit import (
    E2M1_PAIRS,
    E4M3_TO_FLOAT32,
    ArrayOps,
    block_cover,
    grouped_affine,
    is_paddle,
    lookup_blocks,
    lookup_rounded,
    ops_for,
    pair_items,
    scale_to_float32,
)
from flexq.formatkit.words import decode_slot_groups
from flexq_format_quark.config import FORMAT_NAME
from flexq_format_quark.layout import PACK

if TYPE_CHECKING:
    from flexq.formatkit import BoxSources
    from flexq_format_quark.layout import QuarkLinear

#: E2M1_PAIRS as 8-byte items: one gather copies a byte's two values.
_E2M1_ITEMS = pair_items(E2M1_PAIRS)
#: XOR mask flipping the top bit of each nibble of an int32 word (0x88888888).
_NIBBLE_SIGNS = -0x77777778


def decode(linear: QuarkLinear, sources: BoxSources, out: Any = None) -> Any:
    """The float32 box ``sources.target`` of ``linear``'s logical weight.

    :raises FormatError: when a source box is not the one the plan named.
    """
    target = sources.target
    (o0, i0), (no, ni) = target.global_offset, target.local_shape
    weight, scale = sources[linear.weight], sources[linear.scale]
    ops = ops_for(weight)
    if linear.kind in ("fp8-tensor", "fp8-channel"):
        sources.expect(
            {linear.weight: (no, ni)}, logical_key=linear.weight, format_name=FORMAT_NAME
        )
        rows = 1 if linear.kind == "fp8-tensor" else no
        s = ops.reshape(scale_to_float32(ops, scale, linear.scale_dtype), (rows, 1))
        if rows == 1 and isinstance(weight, np.ndarray) and sources.rounded_out is not None:
            # one scale: its 256 products rounded once, straight into the bfloat16 target
            return lookup_rounded(E4M3_TO_FLOAT32, weight, s[0, 0], sources.rounded_out)
        return ops.lut_mul(E4M3_TO_FLOAT32, weight, s, out=out)
    if linear.kind == "mxfp4":
        if _whole_mxfp4(linear, weight, scale, i0, ni, out):
            return _mxfp4_banded(linear, weight, scale, out, sources.rounded_out)
        return _mxfp4(ops, linear, weight, scale, i0, ni)
    return _grouped(ops, linear, sources, o0, i0, no, ni, out)


def _whole_mxfp4(linear: QuarkLinear, codes: Any, scale: Any, i0: int, ni: int, out: Any) -> bool:
    """Whether an MXFP4 box takes :func:`_mxfp4_banded`: numpy codes of whole rows of
    whole blocks from column 0, into a C-contiguous ``out`` (or none)."""
    b = linear.group_size
    return (
        isinstance(codes, np.ndarray)
        and codes.ndim == 2
        and codes.flags.c_contiguous
        and b % 2 == 0
        and i0 == 0
        and ni == 2 * codes.shape[1] == int(scale.shape[1]) * b
        and (out is None or out.flags.c_contiguous)
    )


def _mxfp4_banded(
    linear: QuarkLinear,
    codes: np.ndarray,
    scale: Any,
    out: Any,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`_mxfp4` of whole rows of whole blocks, band by band on the worker threads:
    each band looked up (two values per byte) and scaled while in cache, into ``out``
    (a third of the CPU time of a whole-array lookup then multiply, on the quark bench),
    or rounded there into ``rounded`` (``BoxSources.rounded_out``), which is returned."""
    rows, blocks, b = codes.shape[0], int(scale.shape[1]), linear.group_size
    s = scale_to_float32(ops_for(codes), scale, linear.scale_dtype)
    shaped = np.asarray(s, np.float32).reshape(rows, blocks, 1)
    bytes3 = codes.reshape(rows, blocks, b // 2)
    return lookup_blocks(_E2M1_ITEMS, bytes3, shaped, out, rounded)


def _mxfp4(ops: ArrayOps, linear: QuarkLinear, codes: Any, scale: Any, i0: int, ni: int) -> Any:
    """E2M1 pairs times their block's E8M0 scale, trimmed to columns i0..i0+ni."""
    values = ops.lut_pairs(E2M1_PAIRS, codes)
    rows, n = int(values.shape[0]), int(values.shape[1])
    blocks = int(scale.shape[1])
    b = linear.group_size
    s = scale_to_float32(ops, scale, linear.scale_dtype)
    if n == 0:
        return values
    if n == blocks * b:
        shaped = ops.mul_into(
            ops.reshape(values, (rows, blocks, b)), ops.reshape(s, (rows, blocks, 1))
        )
        values = ops.reshape(shaped, (rows, n))
    else:
        values = ops.mul_into(values, ops.repeat(s, b, axis=1)[:, :n])
    start = i0 % b
    return values[:, start : start + ni]


def _grouped(
    ops: ArrayOps,
    linear: QuarkLinear,
    sources: BoxSources,
    o0: int,
    i0: int,
    no: int,
    ni: int,
    out: Any,
) -> Any:
    """``(q - z) * s`` for a box of an int4/uint4 per-group weight stored [in, out/8];
    fills ``out`` when the box is whole words and groups, the usual case."""
    words, zeros, scale = sources[linear.weight], sources[linear.zero], sources[linear.scale]
    if linear.kind == "int4-group":
        words, zeros = _flip_signs(words), _flip_signs(zeros)
    g = linear.group_size
    g0, ng = block_cover(i0, ni, g, linear.in_features)
    col = o0 - PACK * sources.offset(linear.weight)[1]
    # Storage is [in, out]: unpack transposed so codes arrive as [out, in].
    z = ops.unpack(zeros, 4, linear.slots, transposed=True)[col : col + no, :ng]
    s = ops.transpose(ops.float32(scale, linear.scale_dtype))
    start = i0 - g0 * g
    if (
        isinstance(words, np.ndarray)
        and (col, start) == (0, 0)
        and words.shape == (ni, no // PACK)
        and ni == ng * g
        and (out is None or out.flags.c_contiguous)
    ):
        # AutoAWQ's GEMM packing: the kit's banded decoder of it (AWQ GEMM's too), into
        # the bfloat16 target itself where there is one.
        zs, ss = z, s[:no, :ng]
        return decode_slot_groups(words, 4, linear.slots, zs, ss, out, sources.rounded_out)
    q = ops.unpack(words, 4, linear.slots, transposed=True)[col : col + no, :ni]
    # inf * 0 is NaN by definition; a non-finite scale is reported by the core's check.
    with np.errstate(invalid="ignore", over="ignore"):
        if no == 0 or ni == 0:
            return q
        return grouped_affine(ops, q, z, s, g, start)


def _flip_signs(words: Any) -> Any:
    """int32 words with the top bit of every nibble flipped (two's complement -> +8)."""
    if is_paddle(words):
        import paddle

        return paddle.bitwise_xor(words, paddle.full_like(words, _NIBBLE_SIGNS))
    return np.bitwise_xor(words, np.int32(_NIBBLE_SIGNS))
