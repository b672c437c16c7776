"""One GGUF tensor as a logical tensor: its layout, the read plan of a box, its decode.

For the format's plugin. A box of a logical tensor reads the whole blocks covering
its last-dimension range and, for a tensor whose rows llama.cpp permuted, the whole
heads covering its row range (the permutation moves rows only within a head); the
decode dequantizes those bytes in float32, undoes the permutation and cuts the box.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.plan import ReadPlan, TargetSlice, block_cover
from flexq_format_gguf.decode import decode_rows

if TYPE_CHECKING:
    from flexq.formatkit import Sources
    from flexq_format_gguf.ggml import GGMLType

#: float32 bytes one decode band produces (the decode's temporaries are a few of these).
BAND_BYTES = 4 << 20
#: Natural dtype of each float type (gguf-py dequantizes every other type to float32).
NATURAL = {"F16": "float16", "BF16": "bfloat16"}


@dataclass(frozen=True)
class GGUFLayout:
    """A logical tensor stored as one GGUF tensor.

    :ivar shape: the HF (numpy) shape.
    :ivar heads: the heads llama.cpp permuted its rows in, or None.
    """

    shape: tuple[int, ...]
    dtype: str
    sources: tuple[str]
    type: GGMLType
    heads: int | None = None

    @property
    def source(self) -> str:
        return self.sources[0]


def local_plan(layout: GGUFLayout, target: TargetSlice) -> ReadPlan:
    """The source box covering ``target``: whole blocks on the last dimension, whole
    heads on the first when the rows are permuted."""
    offset, shape = list(target.global_offset), list(target.local_shape)
    if layout.heads is not None:
        if len(layout.shape) == 1:  # a permuted bias: rows and blocks share the dim
            offset, shape = [0], [layout.shape[0]]
        else:
            rows = layout.shape[0] // layout.heads
            first, count = block_cover(offset[0], shape[0], rows, layout.shape[0])
            offset[0], shape[0] = first * rows, count * rows
    t = layout.type
    first, count = block_cover(offset[-1], shape[-1], t.block, layout.shape[-1])
    per = 1 if t.plain else t.nbytes  # stored items per block
    offset[-1], shape[-1] = first * per, count * per
    return ReadPlan("local", {layout.source: (tuple(offset), tuple(shape))}, target)


def decode_box(layout: GGUFLayout, sources: Sources, out: Any) -> np.ndarray:
    """The float32 box ``sources.target`` of ``layout``, from its planned bytes.

    A 2-D box is decoded in bands of rows (whole heads when permuted) of about
    :data:`BAND_BYTES` of float32 each, written straight into ``out`` (or a new
    array): the decode's temporaries stay a band's, not a multiple of the tensor.
    """
    raw = np.asarray(sources[layout.source])
    start = list(sources.offset(layout.source))
    t = layout.type
    if not t.plain:
        start[-1] = start[-1] // t.nbytes * t.block
    target = sources.target
    box = [
        slice(o - s, o - s + n)
        for o, s, n in zip(target.global_offset, start, target.local_shape, strict=True)
    ]
    result = np.empty(target.local_shape, np.float32) if out is None else out
    if raw.ndim != 2:
        values = _float32(t, raw)
        if layout.heads is not None:
            values = unpermute(values, layout.heads)
        result[...] = values[tuple(box)]
        return result
    head = layout.shape[0] // layout.heads if layout.heads is not None else 1
    width = raw.shape[1] // (1 if t.plain else t.nbytes) * t.block
    band = max(1, BAND_BYTES // (4 * width * head)) * head
    rows, cols = box
    for lo in range(rows.start // band * band, rows.stop, band):
        chunk = _float32(t, raw[lo : lo + band])
        if layout.heads is not None:
            chunk = unpermute(chunk, chunk.shape[0] // head)
        a, b = max(lo, rows.start), min(lo + band, rows.stop)
        result[a - rows.start : b - rows.start] = chunk[a - lo : b - lo, cols]
    return result


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
