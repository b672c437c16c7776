"""Writing dequantized boxes into the caller's target tensors, and the undo copies.

For the load engine. Host float targets are written through a numpy view of
their own memory (one copy, AOA's transposes as numpy views); device targets
and other dtypes through Paddle 3.3.1's ``assign_sharded_slice``, which also
applies AOA's transposes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.formatkit.arrays import host_view

if TYPE_CHECKING:
    from flexq.load.aoa import Piece


class Scratch:
    """One float32 working buffer for a load, grown to the largest box asked for.

    Pieces rounded to bfloat16/float16 on the host are decoded into it and
    rounded from it straight into their targets: one buffer, written again and
    again (its pages stay mapped), instead of a fresh float32 array per piece.
    """

    def __init__(self) -> None:
        self._buffer = np.empty(0, dtype=np.float32)

    def get(self, shape: tuple[int, ...]) -> np.ndarray:
        """A C-contiguous float32 array of ``shape`` (its contents are garbage)."""
        n = math.prod(shape)
        if self._buffer.size < n:
            self._buffer = np.empty(n, dtype=np.float32)
        return self._buffer[:n].reshape(shape)


def target_view(tensor: Any) -> np.ndarray | None:
    """A writable numpy view of a float host tensor's memory (bfloat16 as uint16 bits),
    or None (device tensors, other dtypes: written through Paddle)."""
    import paddle

    if tensor.dtype not in (paddle.float32, paddle.float16, paddle.bfloat16):
        return None
    return host_view(tensor)


def host_region(p: Piece) -> np.ndarray | None:
    """The piece's target region as a C-contiguous numpy view (float32, bfloat16 as
    uint16 bits, float16), if it has one and AOA does not transpose it."""
    view = target_view(p.target.tensor)
    if view is None or p.transposes:
        return None
    region = view[p.target_box()]
    return region if region.flags.c_contiguous else None


def region(p: Piece) -> Any:
    """The slice of the target tensor that ``p`` writes (a Paddle view)."""
    import paddle

    box = p.target_box()
    return paddle.slice(
        p.target.tensor,
        axes=list(range(len(box))),
        starts=[b.start for b in box],
        ends=[b.stop for b in box],
    )


def host_copy(t: Any) -> Any:
    """A copy of ``t`` in host memory (device memory stays bounded by one batch)."""
    return t.clone() if t.place.is_cpu_place() else t.cpu()


def write(p: Piece, value: Any, transposed: bool = True) -> None:
    """Write ``value`` (the piece's logical box, or an undo copy) into its target region."""
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight
    from paddle.distributed.flex_checkpoint.dcp.utils import assign_sharded_slice

    view = target_view(p.target.tensor) if isinstance(value, np.ndarray) else None
    if view is not None:
        # One copy straight into the target's memory, AOA's transposes as numpy views.
        src = np.transpose(value, p.axes) if transposed and p.transposes else value
        dst = view[p.target_box()]
        np.copyto(dst, src.view(view.dtype) if src.dtype != view.dtype else src)
        return

    if not transposed:
        src_desc, post = p.dst_desc, None
    else:
        src_desc, post = p.src_desc, list(p.transposes) or None
    src = ShardedWeight(
        p.logical_key,
        value,
        tuple(src_desc.local_shape),
        tuple(src_desc.global_shape),
        tuple(src_desc.global_offset),
    )
    assign_sharded_slice(src_desc, src, p.dst_desc, p.target.sharded(), post)
