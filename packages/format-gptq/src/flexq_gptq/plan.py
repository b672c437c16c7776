"""Read plans: which boxes of qweight, qzeros, scales and g_idx one box of ``X.weight`` needs.

Used by the plugin's ``flexq_read_plan``. A box [o0:o0+no, i0:i0+ni] of the
logical [out, in] weight reads:

- qweight: the units of words covering input columns i0..i0+ni (a unit is one
  word, or three words of 32 codes for 3 bits) and exactly the columns o0..;
- g_idx: exactly i0..i0+ni;
- scales: the group rows the box's columns use and exactly the columns o0..;
- qzeros: the same group rows and the units covering columns o0...

Group rows: without ``X.g_idx`` they are the groups covering i0..i0+ni. With
it, a column's group is data (act-order scatters groups over the columns), so
the plan reads the box's ``g_idx`` slice from the checkpoint first (``4*ni``
bytes, counted in ``Checkpoint.bytes_read``) and plans rows ``min .. max`` of
those values: one box per tensor is all a plan can name, so the guaranteed
bound is that bounding range, which is exactly the covering groups when
``g_idx`` is ``i // g`` and at most every group under act-order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from flexq import Checkpoint, FormatError, ReadPlan, TargetSlice, block_cover
from flexq_gptq.config import FORMAT_NAME

if TYPE_CHECKING:
    from flexq.plan import Box
    from flexq_gptq.layout import GptqLinear


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


def group_rows(ckpt: Checkpoint, linear: GptqLinear, i0: int, ni: int) -> tuple[int, int]:
    """(first row, rows) of scales/qzeros that input columns i0..i0+ni use."""
    if not linear.has_g_idx:
        return block_cover(i0, ni, linear.group_size, linear.in_features)
    if ni == 0:
        return 0, 0
    values = ckpt.read(linear.g_idx, (i0,), (ni,)).astype(np.int64)
    check_groups(ckpt, linear, values, i0)
    lo, hi = int(values.min()), int(values.max())
    return lo, hi - lo + 1


def source_boxes(ckpt: Checkpoint, linear: GptqLinear, target: TargetSlice) -> dict[str, Box]:
    """The source boxes (offset, shape) that produce the ``target`` box of ``linear``."""
    (o0, i0), (no, ni) = target.global_offset, target.local_shape
    p = linear.packing
    u0, nu = block_cover(i0, ni, p.unit_codes, linear.in_features)
    c0, nc = block_cover(o0, no, p.unit_codes, linear.out_features)
    g0, ng = group_rows(ckpt, linear, i0, ni)
    uw = p.unit_words
    boxes: dict[str, Box] = {
        linear.qweight: ((u0 * uw, o0), (nu * uw, no)),
        linear.qzeros: ((g0, c0 * uw), (ng, nc * uw)),
        linear.scales: ((g0, o0), (ng, no)),
    }
    if linear.has_g_idx:
        boxes[linear.g_idx] = ((i0,), (ni,))
    return boxes


def local_plan(ckpt: Checkpoint, linear: GptqLinear, target: TargetSlice) -> ReadPlan:
    """A plan that reads only the words and groups covering ``target``."""
    return ReadPlan("local", source_boxes(ckpt, linear, target), target)
