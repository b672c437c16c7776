"""The AWQ dequantization, written once for numpy arrays and Paddle tensors.

:func:`decode` is the format's decode (``flexq_apply``). For a box of the logical [out, in]
weight: W[o, i] = (q[o, i] - z[o, i // g]) * s[o, i // g], computed in float32.
Every step is exact (4-bit codes and zeros are small integers, their
difference times an F16/BF16 scale fits float32's mantissa), so the numpy and
Paddle paths give identical bits and the caller's single rounding is the only
one.

The boxes in ``plan.source_slices`` may be larger than needed (partly covered
words and groups, or whole tensors for a global plan); positions inside them
are found from the boxes' offsets, so one routine serves both plan modes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.formatkit import (
    block_cover,
    decode_in_row_bands,
    grouped_affine,
    ops_for,
)
from flexq.formatkit.words import decode_slot_groups, unpack_less_zeros
from flexq_int4_awq.layout import PACK, SEQUENTIAL, AwqLinear, slots_for

if TYPE_CHECKING:
    from flexq.formatkit import BoxSources

#: bits per AWQ code.
BITS = 4


def decode(linear: AwqLinear, sources: BoxSources, out: Any = None) -> Any:
    """The format's ``decode``; fills ``out`` when the box is exactly the planned words
    and whole groups, the usual case. Nothing is left to refuse here once
    :mod:`flexq_int4_awq.detect` has checked the shapes."""
    plan = sources.plan
    qw, qz, sc = sources[linear.qweight], sources[linear.qzeros], sources[linear.scales]
    ops = ops_for(qw)
    (o0, i0), (no, ni) = plan.target.global_offset, plan.target.local_shape
    (qw_r, qw_c), _ = plan.source_slices[linear.qweight]
    (qz_r, qz_c), _ = plan.source_slices[linear.qzeros]
    (sc_r, sc_c), _ = plan.source_slices[linear.scales]
    g = linear.group_size
    g0, ng = block_cover(i0, ni, g, linear.in_features)
    slots = slots_for(linear.version)
    scales = ops.float32(sc, linear.scale_dtype)
    gemm = linear.version == "gemm"
    if gemm:
        # Storage is [in, out]: unpack transposed so codes arrive as [out, in].
        o, i = o0 - PACK * qw_c, i0 - qw_r
        unpacked = (PACK * int(qw.shape[1]), int(qw.shape[0]))
        oz, gz = o0 - PACK * qz_c, g0 - qz_r
        os_, gs = o0 - sc_c, g0 - sc_r
    else:
        o, i = o0 - qw_r, i0 - PACK * qw_c
        unpacked = (int(qw.shape[0]), PACK * int(qw.shape[1]))
        oz, gz = o0 - qz_r, g0 - PACK * qz_c
        os_, gs = o0 - sc_r, g0 - sc_c
    if no == 0 or ni == 0:
        return ops.unpack(qw, BITS, slots, transposed=gemm)[o : o + no, i : i + ni]
    z = ops.unpack(qz, BITS, slots, transposed=gemm)[oz : oz + no, gz : gz + ng]
    s = (ops.transpose(scales) if gemm else scales)[os_ : os_ + no, gs : gs + ng]
    start = i0 - g0 * g
    # inf * 0 is NaN by definition; a non-finite scale is reported once, by the
    # plugin's ScaleWarning, not by numpy.
    with np.errstate(invalid="ignore", over="ignore"):
        if (
            isinstance(qw, np.ndarray)
            and (o, i, start) == (0, 0, 0)
            and unpacked == (no, ni)
            and ni == ng * g
            and (out is None or out.flags.c_contiguous)
            # GEMV bytes decode as (low, high) nibble pairs: sequential slots,
            # little-endian words.
            and (gemm or (np.little_endian and slots == SEQUENTIAL))
        ):
            z, s = np.asarray(z), np.asarray(s)
            return _banded(qw, z, s, g, gemm, slots, out, sources.rounded_out)
        q = ops.unpack(qw, BITS, slots, transposed=gemm)[o : o + no, i : i + ni]
        return grouped_affine(ops, q, z, s, g, start)


def _banded(
    words: np.ndarray,
    z: np.ndarray,
    s: np.ndarray,
    g: int,
    gemm: bool,
    slots: tuple[int, ...],
    out: np.ndarray | None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """``(q - z) * s`` for a box that is exactly the words and whole groups, with
    every step of a band of output rows done while it is still in cache, bands on
    the worker threads (with ``rounded``, ``BoxSources.rounded_out``, each band rounded
    into it while in cache, and it is returned).

    GEMM words are AutoAWQ's packing across output rows: the kit's
    :func:`~flexq.formatkit.words.decode_slot_groups` (which AMD Quark's int4 shares).
    GEMV words hold a row's codes in order, so a band is the kit's
    :func:`~flexq.formatkit.words.unpack_less_zeros` of its words (the zeros off the
    unpacked bytes), then the scale.
    """
    no, ng = z.shape
    ni = ng * g
    if gemm:
        return decode_slot_groups(words, BITS, slots, z, s, out, rounded)
    src = np.ascontiguousarray(words).view(np.uint32)

    def work(run: range, values: np.ndarray) -> None:
        unpack_less_zeros(src[run.start : run.stop], BITS, values, z[run.start : run.stop])
        with np.errstate(invalid="ignore", over="ignore"):
            v3 = values.reshape(-1, ng, g)
            v3 *= s[run.start : run.stop, :, None]

    return decode_in_row_bands(work, (no, ni), out, rounded)
