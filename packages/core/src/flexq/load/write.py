"""Filling the caller's targets: decode each piece and write it, batch by batch.

For the load engine, once every piece is mapped, planned and checked. Host
float targets are written through a numpy view of their own memory (a format
decodes straight into it where the box allows; otherwise one copy, AOA's
transposes as numpy views); device targets and other dtypes through Paddle
3.3.1's ``assign_sharded_slice``, which also applies AOA's transposes.

While a piece decodes, the pieces after it are being read from disk
(:mod:`flexq.load.readahead`, into the kernel's page cache, not this process).
By default each piece is written as soon as it is decoded and its file pages
are let go right after, so memory above the targets stays near one piece (the
check before the first write decodes only the first rows of each format's
smallest piece). ``atomic`` loads stage a whole batch before its
first write and keep undo copies of the regions earlier batches wrote, so a
failure only decoding reveals (a plugin error) restores every target; so does
an interrupt (KeyboardInterrupt), except one that comes once the last batch is
being written: the load then completes and the interrupt is raised after it.
"""

from __future__ import annotations

import math
from contextlib import ExitStack, closing
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.interrupts import uninterrupted
from flexq.io.dtypes import FLOAT_DTYPES
from flexq.load.readahead import AdviceThread, ReadAhead
from flexq.load.report import LoadReport
from flexq.load.sources import planned_bytes
from flexq.numerics.arrays import host_view

if TYPE_CHECKING:
    from collections.abc import Iterator

    from flexq.composition import Composition
    from flexq.load.pieces import Piece
    from flexq.load.report import LoadOptions
    from flexq.load.sources import Source
    from flexq.plan import ReadPlan


def fill(
    ct: Composition, pieces: list[Piece], source_type: type[Source], options: LoadOptions
) -> LoadReport:
    """Check what can be checked, then decode every piece from a source of ``source_type``
    and write it into its target. On a failure part-way the regions written so far are
    restored when ``options.atomic`` (and stay written otherwise)."""
    batches = list(_batches(pieces, options.max_inflight_bytes))
    source = source_type(ct, [p.plan for p in pieces], options)
    # The checks read every piece's scales: all queued at once (they are held until the
    # piece is written anyway), then the first pieces' weights, read while the checks run.
    for i, p in enumerate(pieces):
        source.prefetch(i, p.plan.checked)
    # The window's advice is given on a thread of its own (AdviceThread): on a cold
    # cache the kernel takes as long to queue a window's reads as a piece's decode.
    adviser = AdviceThread(source)
    ahead = ReadAhead(adviser, [planned_bytes(ct.checkpoint, [p.plan]) for p in pieces])
    with closing(adviser):  # advice still queued is dropped when the load ends
        return _checked_then_written(ct, pieces, batches, source, ahead, options)


def _checked_then_written(
    ct: Composition,
    pieces: list[Piece],
    batches: list[list[int]],
    source: Source,
    ahead: ReadAhead,
    options: LoadOptions,
) -> LoadReport:
    """:func:`fill` once its source and read-ahead window are set up: every check, then
    every piece decoded and written (restored on a failure when ``options.atomic``)."""
    ahead.before(0)
    for i, p in enumerate(pieces):
        # What scales can reveal fails here, before the first write: only the failures
        # decoding itself finds need the undo copies of ``atomic``. A format that cannot
        # decode at all (it raises, or returns the wrong shape or dtype) fails here too:
        # the first rows of its smallest piece are decoded and dropped (a few MiB, so
        # the check costs neither time nor memory at any size).
        _decode(ct, source, i, p, p.probe, "float32", check=True)
    source.release()
    if options.before_write is not None:
        options.before_write()  # the other checks of the same load (kept targets)
    # Every check has passed: only now do lazy targets get their storage (filled below).
    import paddle

    for target in {id(p.target): p.target for p in pieces}.values():
        if target.lazy:
            target.tensor.set_value(paddle.zeros(list(target.local_shape), target.dtype))
    undo: list[tuple[Piece, Any]] = []
    scratch = Scratch()
    # Once the last batch of an atomic load starts being written the load completes: an
    # interrupt (Ctrl-C) then waits for its end and is raised after it, every target loaded.
    finish = ExitStack()
    try:
        for n, batch in enumerate(batches):
            staged = []
            for i in batch:
                p = pieces[i]
                view = host_view(p.target.tensor) if p.target.dtype in FLOAT_DTYPES else None
                # Float host targets are written through a numpy view of their memory;
                # without atomicity a format may decode straight into it (a
                # C-contiguous region AOA does not transpose).
                into = None
                if view is not None and not options.atomic and not p.transposes:
                    into = view[_target_box(p)]
                    into = into if into.flags.c_contiguous else None
                # A tensor stored in the target's dtype is read straight into it.
                same = ct.unchanged(p.logical_key, p.plan, p.target.dtype)
                if (
                    into is not None
                    and same is not None
                    and source.read_into(i, p.plan, same, into)
                ):
                    source.release()
                    continue
                # Host targets in another float dtype are rounded from one float32 buffer.
                work = None
                if view is not None and p.target.dtype != "float32":
                    work = scratch.get(tuple(int(d) for d in p.src_desc.local_shape))
                ahead.before(i)  # the next pieces are read from disk while this one decodes
                value = _decode(
                    ct,
                    source,
                    i,
                    p,
                    p.plan,
                    p.target.dtype,
                    into,
                    work,
                    host=view is not None,
                    then=_next_decoded(ct, pieces, i),
                )
                if into is not None and np.may_share_memory(value, into):
                    source.release()
                    continue
                if options.atomic:
                    staged.append((p, value, view))
                else:
                    write(p, value, view)
                    # The piece is in its target: let its file pages go now, so memory
                    # above the targets stays near one piece, not one batch.
                    source.release()
            # An atomic batch is staged whole before its first write, so only the
            # batches written before a later failure need restoring; and it is written
            # whole (an interrupt waits for the end of it), so no restore misses a piece.
            keep = n < len(batches) - 1
            if staged and not keep:
                finish.enter_context(uninterrupted())
            with uninterrupted():
                for p, value, view in staged:
                    if keep:
                        undo.append((p, host_copy(region(p))))
                    write(p, value, view)
            del staged
            source.release()
    except BaseException:
        with uninterrupted():  # a second Ctrl-C must not stop a restore half-way
            for p, old in reversed(undo):
                write(p, old.to(p.target.tensor.place), None, transposed=False)
        finish.close()
        raise
    finish.close()
    casts = tuple(dict.fromkeys(p.cast for p in pieces if p.cast is not None))
    return LoadReport(
        source.name,
        len(pieces),
        len(batches),
        source.bytes_read,
        source.planned_bytes,
        casts,
        source.pages_read_bytes,
        source.disk_read_bytes,
    )


def _decode(
    ct: Composition,
    source: Source,
    index: int,
    p: Piece,
    plan: ReadPlan | None,
    dtype: str,
    into: np.ndarray | None = None,
    work: np.ndarray | None = None,
    *,
    check: bool = False,
    host: bool = True,
    then: int | None = None,
) -> Any:
    """Piece ``p``'s box of ``plan`` (``p.plan`` or its probe) from ``source``, dequantized
    to ``dtype`` (numpy for ``host`` targets, else Paddle). With ``check`` the piece's
    scales and the other components its plan declares (``ReadPlan.checked``) are
    checked too (and held for its own decode, as a decoded probe's boxes are), and
    ``plan`` may be None: nothing is decoded. ``then``: the piece decoded after this
    one, whose boxes are read while this one decodes."""
    scales = source.boxes(index, p.plan, p.plan.checked, keep=True) if check else {}
    found = source.boxes(index, plan, keep=check) if plan is not None else {}
    if then is not None:
        source.fetch_ahead(then)
    value = None
    if plan is not None:
        value = ct.decode(p.logical_key, found, plan, dtype, out=into, scratch=work, host=host)
    # Checks run before the first write, so a probe may decode before its scales are
    # checked: a non-finite scale decodes to non-finite values, never to an exception.
    if check:
        ct.check_plan(p.logical_key, p.plan, scales)
    return value


def _next_decoded(ct: Composition, pieces: list[Piece], index: int) -> int | None:
    """The piece after ``index`` when it will be decoded (not read straight into its target,
    which needs no boxes held), else None."""
    after = index + 1
    if after >= len(pieces):
        return None
    p = pieces[after]
    return after if ct.unchanged(p.logical_key, p.plan, p.target.dtype) is None else None


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


def write(p: Piece, value: Any, view: np.ndarray | None, transposed: bool = True) -> None:
    """Write ``value`` (the piece's logical box, or an undo copy) into its target region:
    through ``view``, the numpy view of a float host target's memory (bfloat16 as
    uint16 bits), when there is one and ``value`` is numpy; else through Paddle."""
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight
    from paddle.distributed.flex_checkpoint.dcp.utils import assign_sharded_slice

    if view is not None and isinstance(value, np.ndarray):
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
    assign_sharded_slice(src_desc, src, p.dst_desc, p.target.sharded, post)
