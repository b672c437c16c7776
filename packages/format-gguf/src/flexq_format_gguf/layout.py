"""One HF tensor made of GGUF tensors: its layout, the read plan of a box, its decode.

For the format's plugin. A logical tensor is one GGUF tensor (possibly with leading
size-1 dimensions HF adds), or several stacked along dimension 1 (transformers'
``gate_up_proj`` of llama.cpp's ``ffn_gate_exps`` and ``ffn_up_exps``). A box reads,
of each part it meets, the whole blocks covering its last-dimension range and, for a
tensor whose rows llama.cpp permuted, the whole heads covering its row range (the
permutation moves rows only within a head); the decode dequantizes those bytes in
float32, undoes the permutation and cuts the box.

Every block type's float16 scales (``d``, and ``dmin`` / ``m`` where the type has
one) are checked before the first write: the plan reads them through the blocks view
of each part (:func:`flexq_format_gguf.checkpoint.blocks_view`) as a ``checks``
source, a few bytes per block, and :func:`check_block_scales` warns (or fails under
``FLEXQ_NONFINITE_SCALES=error``) naming the file, the GGUF tensor, its type and the
block.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.formatkit import check_scales, float32_to_bfloat16_bits
from flexq.plan import ReadPlan, TargetSlice, block_cover
from flexq_format_gguf.decode import decode_rows

if TYPE_CHECKING:
    from collections.abc import Sequence

    from flexq.formatkit import BoxSources
    from flexq_format_gguf.ggml import GGMLType

#: float32 bytes one decode band produces (the decode's temporaries are a few of these).
BAND_BYTES = 4 << 20
#: Natural dtype of each float type (gguf-py dequantizes every other type to float32).
NATURAL = {"F16": "float16", "BF16": "bfloat16"}
#: The dimension stacked parts are concatenated along (``[E, 2I, H]`` from two ``[E, I, H]``).
STACK_AXIS = 1
#: Byte offset and names of each block type's float16 scale fields (ggml's block_q* structs).
SCALE_FIELDS: dict[str, tuple[int, tuple[str, ...]]] = {
    "Q8_0": (0, ("d",)), "Q4_0": (0, ("d",)), "Q4_1": (0, ("d", "m")), "Q5_0": (0, ("d",)),
    "Q5_1": (0, ("d", "m")), "Q2_K": (80, ("d", "dmin")), "Q3_K": (108, ("d",)),
    "Q4_K": (0, ("d", "dmin")), "Q5_K": (0, ("d", "dmin")), "Q6_K": (208, ("d",)),
    "IQ4_NL": (0, ("d",)), "IQ4_XS": (0, ("d",)),
}  # fmt: skip


@dataclass(frozen=True)
class Part:
    """One GGUF tensor of a logical tensor.

    :ivar shape: its numpy shape.
    :ivar blocks: the key of its blocks view (block types only), whose scale fields the
        plan's check reads.
    """

    source: str
    shape: tuple[int, ...]
    type: GGMLType
    blocks: str | None = None


@dataclass(frozen=True)
class GGUFLayout:
    """A logical tensor stored as GGUF tensors.

    :ivar key: its HF name (for messages).
    :ivar shape: the HF (numpy) shape.
    :ivar parts: its GGUF tensors, stacked along :data:`STACK_AXIS` when more than one.
    :ivar heads: the heads llama.cpp permuted its rows in, or None.
    :ivar unsqueeze: leading size-1 dimensions of ``shape`` the parts do not have.
    """

    key: str
    shape: tuple[int, ...]
    dtype: str
    parts: tuple[Part, ...]
    heads: int | None = None
    unsqueeze: int = 0

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(k for p in self.parts for k in (p.source, p.blocks) if k is not None)


def _pieces(
    layout: GGUFLayout, offset: Sequence[int], shape: Sequence[int]
) -> list[tuple[Part, list[int], list[int], int]]:
    """Each part's share of the box ``offset`` + ``shape`` (logical coordinates): (part,
    offset and shape in the part, where along the stack axis it starts in the box)."""
    offset, shape = list(offset[layout.unsqueeze :]), list(shape[layout.unsqueeze :])
    if len(layout.parts) == 1:
        return [(layout.parts[0], offset, shape, 0)]
    out, start, ax = [], 0, STACK_AXIS
    for part in layout.parts:
        n = part.shape[ax]
        lo, hi = max(offset[ax], start), min(offset[ax] + shape[ax], start + n)
        o, s = list(offset), list(shape)
        o[ax], s[ax] = min(max(lo - start, 0), n), max(hi - lo, 0)
        out.append((part, o, s, max(lo - offset[ax], 0)))
        start += n
    return out


def local_plan(layout: GGUFLayout, target: TargetSlice) -> ReadPlan:
    """The source boxes covering ``target``: whole blocks on the last dimension, whole
    heads on the first when the rows are permuted; and the scale fields of those blocks."""
    boxes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for part, offset, shape, _ in _pieces(layout, target.global_offset, target.local_shape):
        if layout.heads is not None:
            if len(part.shape) == 1:  # a permuted bias: rows and blocks share the dim
                offset, shape = [0], [part.shape[0]]
            else:
                rows = part.shape[0] // layout.heads
                first, count = block_cover(offset[0], shape[0], rows, part.shape[0])
                offset[0], shape[0] = first * rows, count * rows
        t = part.type
        first, count = block_cover(offset[-1], shape[-1], t.block, part.shape[-1])
        if part.blocks is not None:
            at, fields = SCALE_FIELDS[t.name]
            lead = (tuple(offset[:-1]), tuple(shape[:-1]))
            boxes[part.blocks] = ((*lead[0], first, at), (*lead[1], count, 2 * len(fields)))
        per = 1 if t.plain else t.nbytes  # stored items per block
        offset[-1], shape[-1] = first * per, count * per
        boxes[part.source] = (tuple(offset), tuple(shape))
    checks = tuple(p.blocks for p in layout.parts if p.blocks is not None)
    check = partial(check_block_scales, layout) if checks else None
    return ReadPlan("local", boxes, target, checks=checks, check=check)


def check_block_scales(layout: GGUFLayout, sources: BoxSources) -> None:
    """Warn (or fail, as ``FLEXQ_NONFINITE_SCALES`` says) when a block's float16 scale
    of ``layout``'s parts is NaN or infinite, naming the file, tensor, type and block."""
    for part in layout.parts:
        if part.blocks is None:
            continue
        fields = SCALE_FIELDS[part.type.name][1]
        raw = np.ascontiguousarray(sources[part.blocks])
        halves = raw.view("<f2").astype(np.float32)
        offset = sources.offset(part.blocks)
        dims = ["expert", "row"][max(0, 4 - halves.ndim) :][: halves.ndim - 2]
        check_scales(
            halves,
            scale=sources.checkpoint.info(part.source),
            logical_key=layout.key,
            format_name="gguf",
            offset=(*offset[:-1], 0),
            why=(
                f"makes {layout.key!r} non-finite (index: {', '.join([*dims, 'block'])}, field "
                f"{'/'.join(fields)} of its {part.type.name} blocks of {part.type.block}; "
                "download or quantize the file again)"
            ),
        )


def decode(layout: GGUFLayout, sources: BoxSources, out: Any) -> np.ndarray:
    """The float32 box ``sources.target`` of ``layout``, from its planned bytes, or its
    bfloat16 bits in ``sources.rounded_out`` (a bfloat16 target's memory) when there is one.

    Each part's share is decoded in bands of rows (whole heads when permuted) of about
    :data:`BAND_BYTES` of float32 each, written straight into ``out`` (or a new array),
    or rounded straight into the bfloat16 target: the decode's temporaries stay a band's,
    not a multiple of the tensor.
    """
    target = sources.target
    rounded = sources.rounded_out
    if rounded is not None:
        result = rounded
    else:
        result = np.empty(target.local_shape, np.float32) if out is None else out
    view = result[(0,) * layout.unsqueeze]
    for part, offset, shape, at in _pieces(layout, target.global_offset, target.local_shape):
        if 0 in shape:
            continue
        raw = np.asarray(sources[part.source])
        start = list(sources.offset(part.source))
        if not part.type.plain:
            start[-1] = start[-1] // part.type.nbytes * part.type.block
        box = [slice(o - s, o - s + n) for o, s, n in zip(offset, start, shape, strict=True)]
        into = view
        if len(layout.parts) > 1:
            cut = [slice(None)] * view.ndim
            cut[STACK_AXIS] = slice(at, at + shape[STACK_AXIS])
            into = view[tuple(cut)]
        _decode_part(part, layout.heads, raw, box, into)
    return result


def _decode_part(
    part: Part, heads: int | None, raw: np.ndarray, box: list[slice], out: np.ndarray
) -> None:
    """Fill ``out`` with ``box`` of the float32 values of ``raw`` (one part's planned
    bytes): a 2-D box in bands of rows, a higher one slab by slab of its first dimension.
    A uint16 ``out`` (a bfloat16 target's bits) gets them rounded once (:func:`_put`)."""
    t = part.type
    if raw.ndim > 2:
        for i, lead in enumerate(range(box[0].start, box[0].stop)):
            _decode_part(part, heads, raw[lead], box[1:], out[i])
        return
    if raw.ndim != 2:
        values = _float32(t, raw)
        if heads is not None:
            values = unpermute(values, heads)
        _put(out, values[tuple(box)])
        return
    head = part.shape[0] // heads if heads is not None else 1
    width = raw.shape[1] // (1 if t.plain else t.nbytes) * t.block
    rows, cols = box
    if (
        not t.plain
        and rows.start % head == 0
        and rows.stop % head == 0
        and (cols.start, cols.stop) == (0, width)
        and out.flags.c_contiguous
        and out.shape == (rows.stop - rows.start, width)
    ):
        # Whole rows (whole heads) into a contiguous box: decoded in place, band by band
        # on the worker threads (no float32 copy of the box, no second pass). llama's
        # Q/K permutation moves whole rows within a head, so it is undone on the stored
        # rows first (bytes: a fraction of the float32 a permuted copy would move).
        stored = raw[rows] if heads is None else unpermute(raw[rows], len(out) // head)
        if out.dtype == np.uint16:
            decode_rows(t.name, stored, rounded=out)
        else:
            decode_rows(t.name, stored, out=out)
        return
    band = max(1, BAND_BYTES // (4 * width * head)) * head
    for lo in range(rows.start // band * band, rows.stop, band):
        chunk = _float32(t, raw[lo : lo + band])
        if heads is not None:
            chunk = unpermute(chunk, chunk.shape[0] // head)
        a, b = max(lo, rows.start), min(lo + band, rows.stop)
        _put(out[a - rows.start : b - rows.start], chunk[a - lo : b - lo, cols])


def _put(out: np.ndarray, values: np.ndarray) -> None:
    """Float32 ``values`` into ``out``: as they are, or, into uint16 (a bfloat16 target's
    bits), rounded once as the core rounds."""
    if out.dtype == np.uint16:
        out[...] = float32_to_bfloat16_bits(values)
    else:
        out[...] = values


def _float32(t: GGMLType, raw: np.ndarray) -> np.ndarray:
    if t.name == "BF16":  # uint16 bits: the upper half of a float32
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if t.plain:
        return raw.astype(np.float32)  # exact for F16 and F32 (what a GGUF float holds)
    return decode_rows(t.name, raw)


def unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's ``LlamaModel.permute`` over ``heads`` heads of ``rows`` (the
    first dimension): each head's rows back from (half, pair) to (pair, half) order,
    as transformers' ``reverse_permute_weights`` does."""
    shape = rows.shape
    return rows.reshape(heads, shape[0] // heads // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
