"""Filling the caller's targets: decode each piece and write it, batch by batch.

For the load engine, once every piece is mapped, planned and checked. Host
float targets are written through a numpy view of their own memory (a format
decodes straight into it where the box allows; otherwise one copy, AOA's
transposes as numpy views); device targets and other dtypes through Paddle
3.3.1's ``assign_sharded_slice``, which also applies AOA's transposes.

By default each piece is written as soon as it is decoded and its file pages
are let go right after, so memory above the targets stays near one piece (the
check before the first write decodes only the first rows of each format's
smallest piece). ``atomic`` loads stage a whole batch before its
first write and keep undo copies of the regions earlier batches wrote, so a
failure only decoding reveals (a plugin error) restores every target.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.formatkit.arrays import host_view
from flexq.formatkit.rounding import to_paddle
from flexq.load.aoa import rows_per_cut
from flexq.load.report import LoadReport
from flexq.plan import TargetSlice
from flexq.plugin.passthrough import NAME as PASSTHROUGH

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from flexq.compose import ComposedTransform
    from flexq.load.aoa import Piece
    from flexq.load.report import LoadOptions
    from flexq.load.sources import Source
    from flexq.plan import Box, ReadPlan


def fill(
    ct: ComposedTransform, pieces: list[Piece], source: Source, options: LoadOptions
) -> LoadReport:
    """Check what can be checked, then decode every piece from ``source`` and write it
    into its target. On a failure part-way the regions written so far are restored
    when ``options.atomic`` (and stay written otherwise)."""
    batches = list(_batches(pieces, options.max_inflight_bytes))
    # The smallest piece of every format (the passthrough owner aside).
    probes: dict[str, int] = {}
    for i, p in enumerate(pieces):
        if p.owner != PASSTHROUGH and (
            p.owner not in probes or p.nbytes < pieces[probes[p.owner]].nbytes
        ):
            probes[p.owner] = i
    source.prepare([p.plan for p in pieces])
    for i, p in enumerate(pieces):
        # What scales can reveal fails here, before the first write: only the failures
        # decoding itself finds need the undo copies of ``atomic``.
        if p.plan.scales:
            ct.check_scales(
                p.logical_key, p.plan, source.boxes(i, p.plan, p.plan.scales, keep=True)
            )
        # A format that cannot decode at all (it raises, or returns the wrong shape or
        # dtype) fails here too: the first rows of its smallest piece are decoded and
        # dropped (a few MiB, so the check costs neither time nor memory at any size).
        if probes.get(p.owner) == i:
            plan = probe_plan(ct, p)
            held = source.boxes(i, p.plan, keep=True)
            ct.dequantize(p.logical_key, crop(held, p.plan, plan), plan, "float32")
    source.release()
    # Every check has passed: only now do lazy targets get their storage (filled below).
    for target in {id(p.target): p.target for p in pieces}.values():
        if target.lazy:
            target.allocate()
    undo: list[tuple[Piece, Any]] = []
    scratch = Scratch()
    try:
        for n, batch in enumerate(batches):
            staged = []
            for i in batch:
                p = pieces[i]
                view = target_view(p.target.tensor)
                box = _target_box(p)
                # Without atomicity a format may decode straight into the target (a
                # C-contiguous region AOA does not transpose).
                into = None
                if view is not None and not options.atomic and not p.transposes:
                    into = view[box]
                    into = into if into.flags.c_contiguous else None
                # Host targets in another float dtype are rounded from one float32 buffer.
                work = None
                if view is not None and p.target.dtype != "float32":
                    work = scratch.get(tuple(int(d) for d in p.src_desc.local_shape))
                found = source.boxes(i, p.plan)
                value = ct.dequantize(
                    p.logical_key, found, p.plan, p.target.dtype, out=into, scratch=work
                )
                if view is None:
                    value = to_paddle(value, p.target.dtype)
                if into is not None and np.may_share_memory(value, into):
                    source.release()
                    continue
                if options.atomic:
                    staged.append((p, value))
                else:
                    write(p, value)
                    # The piece is in its target: let its file pages go now, so memory
                    # above the targets stays near one piece, not one batch.
                    source.release()
            # An atomic batch is staged whole before its first write, so only the
            # batches written before a later failure need restoring.
            keep = n < len(batches) - 1
            for p, value in staged:
                if keep:
                    undo.append((p, host_copy(region(p))))
                write(p, value)
            del staged
            source.release()
    except BaseException:
        for p, old in reversed(undo):
            write(p, old.to(p.target.tensor.place), transposed=False)
        raise
    casts = tuple(dict.fromkeys(p.cast for p in pieces if p.cast is not None))
    return LoadReport(
        source.name, len(pieces), len(batches), source.bytes_read, source.planned_bytes, casts
    )


#: Float32 bytes a probe decodes at most (more when one row of the piece is larger).
PROBE_BYTES = 4 << 20


def probe_plan(ct: ComposedTransform, p: Piece) -> ReadPlan:
    """The owner's plan for the first rows of ``p``'s logical box, at most
    :data:`PROBE_BYTES` of float32 (``p``'s own plan when it is that small already):
    cut along the first axis as :func:`flexq.load.aoa.plan_pieces` cuts large tensors."""
    shape = tuple(int(d) for d in p.src_desc.local_shape)
    if not shape or p.nbytes <= PROBE_BYTES or shape[0] < 2:
        return p.plan
    rows = rows_per_cut(shape, PROBE_BYTES)
    box = TargetSlice(
        tuple(int(d) for d in p.src_desc.global_shape),
        (rows, *shape[1:]),
        tuple(int(d) for d in p.src_desc.global_offset),
        p.plan.target.dtype,
    )
    plan = ct.plan(p.logical_key, box)
    inside = all(
        k in p.plan.source_slices and _within(b, p.plan.source_slices[k])
        for k, b in plan.source_slices.items()
    )
    return plan if inside else p.plan


def _within(inner: Box, outer: Box) -> bool:
    return all(
        o <= i and i + n <= o + m
        for i, n, o, m in zip(inner[0], inner[1], outer[0], outer[1], strict=True)
    )


def crop(found: Mapping[str, Any], plan: ReadPlan, sub: ReadPlan) -> dict[str, Any]:
    """The boxes of ``sub`` cut out of ``found``, the boxes of ``plan`` (which hold them)."""
    out = {}
    for key, (offset, shape) in sub.source_slices.items():
        have = plan.source_slices[key][0]
        out[key] = found[key][
            tuple(slice(o - h, o - h + n) for o, h, n in zip(offset, have, shape, strict=True))
        ]
    return out


def _batches(pieces: list[Piece], limit: int) -> Iterator[list[int]]:
    """Indexes of pieces, grouped so each group's float32 bytes stay under ``limit``."""
    batch: list[int] = []
    size = 0
    for i, piece in enumerate(pieces):
        if batch and size + piece.nbytes > limit:
            yield batch
            batch, size = [], 0
        batch.append(i)
        size += piece.nbytes
    if batch:
        yield batch


def _target_box(p: Piece) -> tuple[slice, ...]:
    """The piece's region as slices of the target's local tensor."""
    start = [d - t for d, t in zip(p.dst_desc.global_offset, p.target.offset, strict=True)]
    return tuple(slice(o, o + n) for o, n in zip(start, p.dst_desc.local_shape, strict=True))


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


def region(p: Piece) -> Any:
    """The slice of the target tensor that ``p`` writes (a Paddle view)."""
    import paddle

    box = _target_box(p)
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
        dst = view[_target_box(p)]
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
