"""Local read plans: the source boxes one rank's box of a bitsandbytes tensor needs.

**4-bit (NF4/FP4).** The codes and absmax blocks run over the FLATTENED tensor,
so a box is planned as the flat range of the dim-0 indices it spans: rows
``[r0, r0+nr)`` are the flat elements ``[r0*L, (r0+nr)*L)`` (L elements per
row). The plan reads the blocks covering that range: the packed bytes of those
blocks, their absmax entries, with double quantization the nested absmax
entries of those blocks' groups, and the two code books whole (64 + 1024
bytes). A row range whose flat ends fall on block boundaries (L a multiple of
``blocksize`` and any rows, or a range aligned by chance) reads exactly its own
blocks; otherwise one partial block at each end, so a rank reads at most
``nr*L/2 + blocksize`` bytes of codes. Where it CANNOT be local: along every
other axis. A column slice ``[:, c0:c0+nc]`` touches every row, and blocks are
rows of the flattened tensor, so the plan reads the whole rows of the box (the
same bytes a row range of the box's rows would) and the decoder cuts the columns: a
2-way column split reads all the codes on each rank. The quant-state blob,
already parsed at detection time, is planned whole too (a few hundred bytes):
Paddle's own loader reports a source that no plan reads as an unexpected key.

**LLM.int8.** Codes ``[out, in]`` map one to one: the box itself, ``SCB`` for
its rows, and the ``weight_format`` scalar.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq import FormatError, ReadPlan, TargetSlice
from flexq.formatkit import to_numpy
from flexq_bitsandbytes.codebook import CODE_BOOKS
from flexq_bitsandbytes.config import FORMAT
from flexq_bitsandbytes.layout import ROW_FORMAT, FourBit, Int8

if TYPE_CHECKING:
    from flexq import Checkpoint
    from flexq.formatkit import BoxSources
    from flexq.plan import Box


def flat_range(t: FourBit, target: TargetSlice) -> tuple[int, int]:
    """Flat elements ``[lo, hi)`` of the dim-0 indices the target spans."""
    r0, nr = target.global_offset[0], target.local_shape[0]
    if 0 in target.local_shape:
        return r0 * t.row_len, r0 * t.row_len
    return r0 * t.row_len, (r0 + nr) * t.row_len


def covering_blocks(t: FourBit, target: TargetSlice) -> tuple[int, int]:
    """Blocks ``[first, end)`` covering the target's flat range (empty for an empty box)."""
    lo, hi = flat_range(t, target)
    if hi <= lo:
        return lo // t.blocksize, lo // t.blocksize
    return lo // t.blocksize, -(-hi // t.blocksize)


def block_elements(t: FourBit, first: int, end: int) -> tuple[int, int]:
    """Flat elements ``[e0, e1)`` held by blocks ``[first, end)`` (the last may be partial)."""
    return first * t.blocksize, min(end * t.blocksize, t.n)


def four_bit_boxes(t: FourBit, target: TargetSlice) -> dict[str, Box]:
    """Every source box a 4-bit ``target`` needs (the plan's, and what the decoder checks)."""
    first, end = covering_blocks(t, target)
    e0, e1 = block_elements(t, first, end)
    b0, b1 = e0 // 2, -(-e1 // 2) if e1 > e0 else e0 // 2
    boxes: dict[str, Box] = {
        t.key: ((b0, 0), (b1 - b0, 1)),
        t.absmax_key: ((first,), (end - first,)),
        t.quant_map_key: ((0,), (16,)),
        t.state_key: ((0,), (t.state_bytes,)),
    }
    if t.nested is not None:
        g0, g1 = nested_groups(t, first, end)
        boxes[t.nested.absmax_key] = ((g0,), (g1 - g0,))
        boxes[t.nested.quant_map_key] = ((0,), (256,))
    return boxes


def nested_groups(t: FourBit, first: int, end: int) -> tuple[int, int]:
    """Nested absmax entries ``[g0, g1)`` of blocks ``[first, end)``."""
    assert t.nested is not None
    size = t.nested.blocksize
    if end <= first:
        return first // size, first // size
    return first // size, -(-end // size)


def int8_boxes(t: Int8, target: TargetSlice) -> dict[str, Box]:
    """The codes box itself, ``SCB`` of its rows, the whole ``weight_format``."""
    (r0, _), (nr, _) = target.global_offset, target.local_shape
    boxes: dict[str, Box] = {t.key: target.box, t.scb_key: ((r0,), (nr,))}
    if t.format_key is not None:
        boxes[t.format_key] = ((0,) * len(t.format_shape), t.format_shape)
    return boxes


def scale_keys(t: FourBit | Int8) -> tuple[str, ...]:
    """The float32 sources a NaN or infinity in which makes the tensor non-finite.

    The core checks them before anything is written. With double quantization
    the absmax codes are U8 indexes, not scales: the nested absmax and the
    nested code book are checked instead (the offset is checked at detection).
    """
    if isinstance(t, Int8):
        return (t.scb_key,)
    if t.nested is not None:
        return (t.nested.absmax_key, t.nested.quant_map_key)
    return (t.absmax_key,)


def check_keys(t: FourBit | Int8) -> tuple[str, ...]:
    """The other sources :func:`check` reads before the first write: the code book (and,
    with double quantization, the U8 absmax codes, scale-like but any byte is valid),
    or an int8 weight's ``weight_format``."""
    if isinstance(t, Int8):
        return () if t.format_key is None else (t.format_key,)
    if t.nested is not None:
        return (t.quant_map_key, t.absmax_key)
    return (t.quant_map_key,)


def check(t: FourBit | Int8, sources: BoxSources) -> None:
    """The plan's check, run by the core before the first write of a load: the stored
    ``quant_map`` is bnb's code book (its kernels ignore the stored one), and an int8
    weight's ``weight_format`` is row-major.

    :raises FormatError: naming the file and the tensor.
    """
    if isinstance(t, FourBit):
        _check_book(sources.checkpoint, t, sources[t.quant_map_key])
    elif t.format_key is not None:
        fmt = to_numpy(sources[t.format_key]).reshape(-1)
        if fmt.size != 1 or int(fmt[0]) != ROW_FORMAT:
            raise FormatError(
                f"{sources.checkpoint.info(t.format_key).file}: tensor {t.format_key!r} is "
                f"{fmt.tolist()}; bitsandbytes loads only row-major int8 weights "
                f"(weight_format {ROW_FORMAT}) (format {FORMAT!r})"
            )


def _check_book(ckpt: Checkpoint, t: FourBit, stored: Any) -> None:
    values = to_numpy(stored).astype(np.float32).reshape(-1)
    if not np.array_equal(values, CODE_BOOKS[t.quant_type]):
        raise FormatError(
            f"{ckpt.info(t.quant_map_key).file}: tensor {t.quant_map_key!r} is not the "
            f"{t.quant_type} code book bitsandbytes decodes with (format {FORMAT!r}): "
            f"{values.tolist()}"
        )


def local_plan(t: FourBit | Int8, target: TargetSlice) -> ReadPlan:
    """The plan reading only what ``target`` needs (see the module doc for the 4-bit limits).

    The core checks its scales and runs :func:`check` on the rest before anything is written.
    """
    boxes = four_bit_boxes(t, target) if isinstance(t, FourBit) else int8_boxes(t, target)
    checks = check_keys(t)
    validate = partial(check, t) if checks else None
    return ReadPlan("local", boxes, target, scale_keys(t), checks, validate)
