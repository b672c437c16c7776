"""The GPTQ dequantization, written once for numpy arrays and Paddle tensors.

Used by the plugin's ``flexq_apply``. For a box of the logical [out, in] weight:
``W[o, i] = s[g(i), o] * (q[i, o] - z[g(i), o])`` in float32, with ``g(i)`` the
column's ``g_idx`` entry (``i // g`` without one). Every step is exact: codes
and zeros are small integers, and their difference times an F16/BF16 scale
fits float32's mantissa, so the numpy and Paddle paths give identical bits and
the caller's single rounding is the only one.

GPTQ v1 zeros (``zeros_minus_one``) are stored as z - 1 by a whole-word
subtraction: AutoGPTQ's and GPTQModel's ``convert_gptq_v2_to_v1_format`` and
auto-round's packer (which sums the shifted ``z - 1`` fields) all borrow from
the next field when z is 0. So for 2, 4 and 8 bits the decoder adds the same
per-field ones back to the whole word modulo 2**32 before unpacking, as
GPTQModel's ``convert_gptq_v1_to_v2_format`` does on load; every z then comes
back exactly, z = 0 included. For 3 bits GPTQModel's loader undoes the offset
field by field (z = (stored + 1) mod 8, codes straddle words), and so does this
decoder.

The boxes in ``plan.source_slices`` may be larger than the target (whole units
of words, the group rows it names); positions inside them are found from the
boxes' offsets, so one routine serves local and global plans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from flexq import Checkpoint, FormatError
from flexq.formatkit import (
    BoxSources,
    decode_in_row_bands,
    ops_for,
    row_bands,
    to_numpy,
    transposed_words,
    unpack_into,
)
from flexq.formatkit.words import unpack_less_zeros
from flexq_gptq.arrayops import gptq_ops_for
from flexq_gptq.config import FORMAT_NAME

if TYPE_CHECKING:
    from flexq_gptq.layout import GptqLinear


def zero_offsets(linear: GptqLinear) -> tuple[tuple[int, ...], int]:
    """(per-word additions, per-field addition) that turn stored zeros into z."""
    p = linear.packing
    if not linear.zeros_minus_one:
        return (0,) * p.unit_words, 0
    if linear.bits == 3:
        return (0,) * p.unit_words, 1
    return p.v1_word_offsets(), 0


def check_groups(ckpt: Checkpoint, linear: GptqLinear, values: np.ndarray, offset: int) -> None:
    """Raise :class:`FormatError` unless every g_idx value names one of the linear's groups."""
    bad = (values < 0) | (values >= linear.n_groups)
    if bad.any():
        at = int(np.argmax(bad))
        info = ckpt.info(linear.g_idx)
        raise FormatError(
            f"{info.file}: tensor {linear.g_idx!r} holds group {int(values[at])} at "
            f"[{offset + at}], outside 0..{linear.n_groups - 1} (format {FORMAT_NAME!r})"
        )


def group_index(linear: GptqLinear, sources: BoxSources) -> np.ndarray:
    """For each input column of the target, its row in the planned scales box (host int64).

    :raises FormatError: when a g_idx value is outside the groups (or outside
        the rows the plan read).
    """
    ckpt, plan = sources.checkpoint, sources.plan
    (_, i0), (_, ni) = plan.target.global_offset, plan.target.local_shape
    (g0, _), (ng, _) = plan.source_slices[linear.scales]
    if linear.has_g_idx:
        host = to_numpy(sources[linear.g_idx])
        (start,), _ = plan.source_slices[linear.g_idx]
        values = host[i0 - start : i0 - start + ni].astype(np.int64)
        check_groups(ckpt, linear, values, i0)
    else:
        values = np.arange(i0, i0 + ni, dtype=np.int64) // linear.group_size
    rows = values - g0
    if rows.size and (rows.min() < 0 or rows.max() >= ng):
        # Only a g_idx that is not i // g under desc_act: false gets here.
        info = ckpt.info(linear.g_idx)
        raise FormatError(
            f"{info.file}: tensor {info.key!r}: columns {i0}..{i0 + ni - 1} of "
            f"{linear.logical_key!r} use groups {int(values.min())}..{int(values.max())}, "
            f"not the i // group_size groups {g0}..{g0 + ng - 1} that desc_act: false "
            f"promises (format {FORMAT_NAME!r})"
        )
    return rows


def check_g_idx(linear: GptqLinear, sources: BoxSources) -> None:
    """The plan's check, run by the core on the planned ``g_idx`` box before the first
    write of a load: every value names a group the box's scales hold (the decoder maps
    them the same way, so a load never fails there after a write)."""
    group_index(linear, sources)


def decode(linear: GptqLinear, sources: BoxSources, out: Any = None) -> Any:
    """The format's ``decode``; fills ``out`` when the box is whole units of qweight
    words, the usual case."""
    qw, qz, sc = sources[linear.qweight], sources[linear.qzeros], sources[linear.scales]
    ops, gops = ops_for(qw), gptq_ops_for(qw)
    p, plan = linear.packing, sources.plan
    (o0, i0), (no, ni) = plan.target.global_offset, plan.target.local_shape
    (r0, _), (nr, _) = plan.source_slices[linear.qweight]
    (_, zc0), _ = plan.source_slices[linear.qzeros]
    rows = group_index(linear, sources)
    word_add, field_add = zero_offsets(linear)
    first = i0 - r0 // p.unit_words * p.unit_codes  # target's first column in the q box
    zfirst = o0 - zc0 // p.unit_words * p.unit_codes
    scales = ops.float32(sc, linear.scale_dtype)
    z = gops.unpack(qz, linear.bits, 1, word_add, field_add)[:, zfirst : zfirst + no]
    # inf * 0 is NaN by definition; a non-finite scale is reported once, by the
    # plugin's ScaleWarning, not by numpy.
    with np.errstate(invalid="ignore", over="ignore"):
        if (
            isinstance(qw, np.ndarray)
            and first == 0
            and nr // p.unit_words * p.unit_codes == ni
            and np.little_endian
            and (out is None or out.flags.c_contiguous)
        ):
            z, scales = np.asarray(z), np.asarray(scales)
            return _banded(qw, z, scales, rows, linear.bits, out, sources.rounded_out)
        q = gops.unpack(qw, linear.bits, 0, (0,) * p.unit_words, 0)[first : first + ni]
        if ni == 0 or no == 0:
            return ops.transpose(q[:, :no])
        wt = q - gops.take_rows(z, rows)
        wt = wt * gops.take_rows(scales, rows)
        return ops.transpose(wt)


def _banded(
    words: np.ndarray,
    z: np.ndarray,
    s: np.ndarray,
    rows: np.ndarray,
    bits: int,
    out: np.ndarray | None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """``s[g] * (q - z[g])`` for a box that is exactly whole units of words, with
    every step of a band of output rows done while it is still in cache, bands on
    the worker threads.

    A band's words are transposed first (``bits/32`` of its output), so output
    row o is transposed word row o, one bit stream the kit's :func:`unpack_into` expands
    (a table lookup per byte; for 3 bits one 12-bit table lookup per 4 codes).
    Columns whose groups are contiguous and whole broadcast one zero and scale per
    group (the zeros come off the unpacked bytes, a zero shared by every group off
    every code); others
    (act-order, partial groups) look each int32 code up in its row's per-group table.
    With ``rounded`` (``BoxSources.rounded_out``) each band is rounded into it while in
    cache (:func:`flexq.formatkit.decode_in_row_bands`), which is returned.
    """
    ni = rows.size
    no = z.shape[1]
    src = words.view(np.uint32)
    zt, st = np.ascontiguousarray(z.T), np.ascontiguousarray(s.T)
    ng = zt.shape[1]
    g = ni // ng if ng and ni % ng == 0 else 0
    grouped = g > 0 and np.array_equal(rows, np.arange(ni) // g)
    zero = float(zt.flat[0]) if zt.size and (zt == zt.flat[0]).all() else 0.0
    if not grouped:
        # Act-order (or partial groups): each code is looked up in its row's table of
        # (c - z) * s over every group and code c, at index base + c; base depends only
        # on the row within a band and the column's group, so it is built once.
        levels = np.arange(1 << bits, dtype=np.float32)
        most = max((len(r) for r in row_bands(no, ni)), default=0)
        base = (np.arange(most, dtype=np.int32)[:, None] * ng + rows.astype(np.int32)) << bits

    def work(run: range, values: np.ndarray) -> None:
        band = slice(run.start, run.stop)
        # Each band transposes its own words: small, in cache, on its thread.
        words_t = transposed_words(src, band)
        if grouped:
            # One zero for every group (symmetric GPTQ: 2^(bits-1)) is taken off
            # by the code table itself: one pass less.
            if zero:
                unpack_into(words_t, bits, values, zero)
            else:
                unpack_less_zeros(words_t, bits, values, zt[band])
            v3 = values.reshape(len(run), ng, g)
            v3 *= st[band, :, None]
        else:
            codes = np.empty(values.shape, np.int32)
            unpack_into(words_t, bits, codes)
            codes += base[: len(run)]
            table = (levels - zt[band, :, None]) * st[band, :, None]
            np.take(table.reshape(-1), codes, out=values, mode="clip")

    def guarded(run: range, values: np.ndarray) -> None:
        # numpy's error state is per thread: each worker sets its own.
        with np.errstate(invalid="ignore", over="ignore"):
            work(run, values)

    return decode_in_row_bands(guarded, (no, ni), out, rounded)
