"""Where the load engine gets the source boxes its read plans name: one interface, two sources.

:class:`DirectSource` reads each rank's boxes straight from the files, through
the descriptors the checkpoint opened them with (no collective communication);
:class:`FlexCheckpointSource` fetches them through Paddle 3.3.1's FlexCheckpoint
loader and resharder: every rank asks for the boxes its read plans name, Paddle
balances the files over the ranks, reads each file once and moves the boxes
between ranks.

Two things 3.3.1 cannot do are worked around without touching the checkpoint
directory: its safetensors metadata generator writes into the checkpoint
directory and knows no I32/F8 dtypes, so flexq writes its own metadata into a
scratch directory of symlinks; and its safetensors reader has no
``float8_e8m0fnu``, so one-byte element formats travel as uint8 (the same
aliasing upstream Paddle uses, undone on exit).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from flexq.errors import FlexqError
from flexq.io.dtypes import DTYPES, dtype
from flexq.io.pages import disk_read_bytes
from flexq.load.fetch_ahead import FETCH_AHEAD_BYTES, Fetched
from flexq.load.quiet import quiet_paddle
from flexq.numerics.arrays import host_to_numpy
from flexq.numerics.threads import run_on_threads, spare_cores

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy as np

    from flexq.composition import Composition
    from flexq.io.checkpoint import Checkpoint
    from flexq.load.report import LoadOptions
    from flexq.plan import Box, ReadPlan

#: Bytes of one part of a large box read on the worker threads (a piece's box, or one
#: read straight into a target): a few MiB, so a piece of tens of MiB gives every worker a
#: part (measured: one 16 MiB box per piece, 256 MiB warm, 60 ms in one read, 32 ms in two).
READ_PART_BYTES = 4 << 20
#: safetensors dtypes Paddle 3.3.1's FlexCheckpoint loader can carry.
FLEXCHECKPOINT_DTYPES = frozenset(name for name, d in DTYPES.items() if d.transport is not None)


class Source(Protocol):
    """Gives the load engine the source boxes of its read plans.

    Opened once per load with every read plan of this rank, before the first box
    is asked for and before any target is written (collective sources fetch then).
    """

    #: the engine name reports and logs use.
    name: str

    def __init__(
        self, ct: Composition, plans: Sequence[ReadPlan], options: LoadOptions
    ) -> None: ...

    def boxes(
        self, index: int, plan: ReadPlan, keys: Sequence[str] | None = None, *, keep: bool = False
    ) -> Mapping[str, Any]:
        """The source boxes of ``plan`` (numpy where they are in host memory), all of
        them or those of ``keys``: ``plans[index]`` itself, or a plan whose boxes lie
        inside those of ``plans[index]`` (the first rows the checks decode). ``keep``:
        the checks before the first write read them; hold them for the piece's own
        decode, so no box is read twice."""

    def prefetch(self, index: int, keys: Sequence[str] | None = None) -> None:
        """``plans[index]``'s boxes (all, or those of ``keys``) will be asked for soon:
        start fetching them now, holding nothing (a hint; a source may ignore it)."""

    def fetch_ahead(self, index: int) -> None:
        """``plans[index]`` decodes next: read its boxes into the process now, beside the
        decode running meanwhile, so :meth:`boxes` hands them over without a wait (a hint;
        a source whose boxes are in memory already ignores it)."""

    def read_into(self, index: int, plan: ReadPlan, key: str, out: np.ndarray) -> bool:
        """Read ``plan``'s one box, of physical tensor ``key``, straight into ``out`` (a
        C-contiguous array of the box in its storage dtype: the target's own memory);
        False when this source cannot (the caller then decodes as usual)."""

    def release(self) -> None:
        """A batch is done: let go of what it read."""

    @property
    def bytes_read(self) -> int:
        """Bytes of source boxes this rank read (itself, or as delivered to it)."""

    @property
    def planned_bytes(self) -> int:
        """Bytes of the source boxes this rank's plans name."""

    @property
    def pages_read_bytes(self) -> int | None:
        """The page floor of this rank's own reads (None: another reader did them)."""

    @property
    def disk_read_bytes(self) -> int | None:
        """Bytes the kernel fetched from storage for this process since the source was
        opened (``/proc/self/io``; None where the platform has no such counter)."""


class _SourceBase:
    """What every source keeps of the load it is opened for; :meth:`_open` does the rest."""

    def __init__(self, ct: Composition, plans: Sequence[ReadPlan], options: LoadOptions) -> None:
        self._ct = ct
        self._plans = plans
        self.planned_bytes = planned_bytes(ct.checkpoint, plans)
        self._disk_before = disk_read_bytes()
        self._open(options)

    def _open(self, options: LoadOptions) -> None:
        """Get ready to hand out boxes (called once, by the constructor)."""

    @property
    def disk_read_bytes(self) -> int | None:
        now = disk_read_bytes()
        return None if now is None or self._disk_before is None else now - self._disk_before


class DirectSource(_SourceBase):
    """Each rank reads exactly its plans' boxes from the files."""

    name = "direct"

    def _open(self, options: LoadOptions) -> None:
        self._held: dict[int, dict[str, Any]] = {}
        self._ahead: dict[int, Fetched] = {}
        # A core the decode leaves free runs the reads ahead; with none, a read's copy
        # would take cycles from the decode (measured: no faster on 2 cores, 2 workers).
        self._fetching = spare_cores() > 0
        # Every file this rank reads is checked before the first write (each read
        # checks its own again), so a file replaced or cut since compose leaves
        # every target as it was, not only those of later pieces.
        ckpt = self._ct.checkpoint
        ckpt.check_files({ckpt.info(k).file for plan in self._plans for k in plan.source_slices})

    def boxes(
        self, index: int, plan: ReadPlan, keys: Sequence[str] | None = None, *, keep: bool = False
    ) -> Mapping[str, Any]:
        if plan is not self._plans[index]:
            # Boxes inside the piece's own (the checks' first rows): read, never held.
            wanted = plan.source_slices if keys is None else keys
            return {k: self._read(k, plan.source_slices[k]) for k in wanted}
        fetched = self._ahead.pop(index, None)
        if fetched is not None:
            self._held.setdefault(index, {}).update(fetched.result())
        held = self._held.get(index, {}) if keep else self._held.pop(index, {})
        for k in plan.source_slices if keys is None else keys:
            if k not in held:
                held[k] = self._read(k, plan.source_slices[k])
        if keep:
            self._held[index] = held
        return held if keys is None else {k: held[k] for k in keys}

    def prefetch(self, index: int, keys: Sequence[str] | None = None) -> None:
        # The kernel fetches the pages into its cache while the caller decodes: this
        # process holds nothing more, and the later reads are the same spans.
        slices = self._plans[index].source_slices
        for k in slices if keys is None else keys:
            self._ct.checkpoint.prefetch(k, *slices[k])

    def fetch_ahead(self, index: int) -> None:
        if not self._fetching or index >= len(self._plans) or index in self._ahead:
            return
        ckpt, slices = self._ct.checkpoint, self._plans[index].source_slices
        held = self._held.get(index, {})
        keys = [k for k in slices if k not in held]
        if not keys or sum(ckpt.box_bytes(k, slices[k][1]) for k in keys) > FETCH_AHEAD_BYTES:
            return
        self._ahead[index] = Fetched(lambda: {k: ckpt.read(k, *slices[k]) for k in keys})

    def read_into(self, index: int, plan: ReadPlan, key: str, out: np.ndarray) -> bool:
        self._held.pop(index, None)
        self._ahead.pop(index, None)
        self._read(key, plan.source_slices[key], out)
        return True

    def _read(self, key: str, box: Box, out: np.ndarray | None = None) -> np.ndarray:
        """Box ``box`` of tensor ``key`` read into ``out`` (or a new array), in row bands on
        the worker threads when it is large: ``preadv`` copies out of the page cache (or
        waits for the disk) without the GIL, so the bands' copies overlap, on cores that
        would otherwise wait for the read (the decode has not started)."""
        offset, shape = box
        ckpt = self._ct.checkpoint
        if out is None:
            out = ckpt.empty(key, offset, shape)
        # Rows are cut only where the stored array's rows are the box's rows (not F6's
        # bytes, nor a 1-D run of packed F4 pairs).
        rows = int(shape[0]) if out.ndim == len(shape) and shape and out.shape[0] == shape[0] else 0
        parts = min(rows, out.nbytes // READ_PART_BYTES)
        if parts < 2:
            return ckpt.read(key, offset, shape, out=out)
        step = -(-rows // parts)

        def work(starts: Sequence[int]) -> None:
            for at in starts:
                n = min(step, rows - at)
                band = (int(offset[0]) + at, *offset[1:])
                ckpt.read(key, band, (n, *shape[1:]), out=out[at : at + n])

        run_on_threads(work, range(0, rows, step), 1)
        return out

    def release(self) -> None:
        # Reads are copies the caller frees (nothing is mapped): nothing to let go.
        return None

    @property
    def bytes_read(self) -> int:
        return self._ct.checkpoint.bytes_read

    @property
    def pages_read_bytes(self) -> int | None:
        return self._ct.checkpoint.pages_read_bytes


class FlexCheckpointSource(_SourceBase):
    """Every rank's boxes fetched collectively by Paddle's loader and resharder."""

    name = "flexcheckpoint"

    def _open(self, options: LoadOptions) -> None:
        ct, plans = self._ct, self._plans
        # One collective call for every rank's plans: ranks may need different numbers
        # of batches, and 3.3.1 reads whole files per rank anyway.
        self._fetched = fetch(
            ct.checkpoint, plans, options.process_group, options.offload, **options.paddle_options
        )

    def boxes(
        self, index: int, plan: ReadPlan, keys: Sequence[str] | None = None, *, keep: bool = False
    ) -> Mapping[str, Any]:
        fetched, have = self._fetched[index], self._plans[index].source_slices
        wanted = plan.source_slices if keys is None else keys
        return host_to_numpy({k: _crop(fetched[k], have[k], plan.source_slices[k]) for k in wanted})

    def prefetch(self, index: int, keys: Sequence[str] | None = None) -> None:
        return None  # every box was fetched when the source opened

    def fetch_ahead(self, index: int) -> None:
        return None  # every box was fetched when the source opened

    def read_into(self, index: int, plan: ReadPlan, key: str, out: np.ndarray) -> bool:
        return False  # the boxes arrive through Paddle's loader, not from the files

    def release(self) -> None:
        return None

    @property
    def bytes_read(self) -> int:
        # Paddle's loader does its own reads; the planned boxes are what reached this rank.
        return self.planned_bytes

    @property
    def pages_read_bytes(self) -> int | None:
        return None  # Paddle's loader reads whole files it picks itself


def planned_bytes(ckpt: Checkpoint, plans: Sequence[ReadPlan]) -> int:
    """Bytes of the source boxes ``plans`` name."""
    return sum(
        ckpt.box_bytes(key, shape)
        for plan in plans
        for key, (_, shape) in plan.source_slices.items()
    )


def transport(st_dtype: str) -> str | None:
    """The Paddle dtype a tensor of safetensors ``st_dtype`` travels as through FlexCheckpoint."""
    return dtype(st_dtype).transport


_ONE_BYTE_ALIASES = ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")
METADATA_NAME = "flex-ckpt.auto_generated.metadata"


@contextlib.contextmanager
def uint8_transport() -> Iterator[None]:
    """Let Paddle's safetensors reader hand one-byte element formats over as uint8."""
    import paddle

    saved = {name: getattr(paddle, name, None) for name in _ONE_BYTE_ALIASES}
    try:
        for name in _ONE_BYTE_ALIASES:
            setattr(paddle, name, paddle.uint8)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                delattr(paddle, name)
            else:
                setattr(paddle, name, value)


@contextlib.contextmanager
def scratch_checkpoint(ckpt: Checkpoint) -> Iterator[str]:
    """A temporary directory of symlinks to the data files (to the very files the
    checkpoint opened, where the platform allows) plus flexq-built metadata."""
    import paddle
    from paddle.distributed.flex_checkpoint.dcp.metadata import (
        LocalTensorIndex,
        LocalTensorMetadata,
        Metadata,
    )

    scratch = tempfile.mkdtemp(prefix="flexq-fc-")
    try:
        for name in sorted({t.file for t in ckpt.tensors.values()}):
            # Linked to the descriptor compose opened: Paddle reads the file whose
            # header planned the boxes, even if another file has taken its name since.
            os.symlink(ckpt.reopen_path(name), os.path.join(scratch, name))
        state, storage = {}, {}
        for key, info in ckpt.tensors.items():
            travels = transport(info.dtype)
            if travels is None:
                continue
            zero = (0,) * len(info.shape)
            state[key] = [LocalTensorMetadata(zero, info.shape, travels, info.shape)]
            storage[LocalTensorIndex(key, zero, local_shape=info.shape)] = info.file
        meta = Metadata(state_dict_metadata=state, storage_metadata=storage)
        paddle.save(meta, os.path.join(scratch, METADATA_NAME))
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _union(a: Box | None, b: Box) -> Box:
    if a is None:
        return b
    lo = tuple(min(x, y) for x, y in zip(a[0], b[0], strict=True))
    hi = tuple(max(x + s, y + t) for x, s, y, t in zip(a[0], a[1], b[0], b[1], strict=True))
    return lo, tuple(top - low for top, low in zip(hi, lo, strict=True))


def fetch(
    ckpt: Checkpoint,
    plans: Sequence[ReadPlan],
    process_group: Any = None,
    offload: bool = False,
    **options: Any,
) -> list[dict[str, Any]]:
    """The source boxes of every plan, fetched collectively (every rank must call this).

    Returns one dict per plan, source key -> Paddle tensor of exactly the planned box.
    """
    import paddle
    from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

    boxes: dict[str, Box] = {}
    for plan in plans:
        for key, box in plan.source_slices.items():
            boxes[key] = _union(boxes.get(key), box)
    bad = sorted(k for k in boxes if transport(ckpt.info(k).dtype) is None)
    if bad:
        raise FlexqError(
            f"{ckpt.path}: {bad[0]!r} is {ckpt.info(bad[0]).dtype}, which FlexCheckpoint "
            "cannot transport on this Paddle; use engine='direct'"
        )
    targets = {
        key: ShardedWeight(
            key,
            paddle.empty(list(shape), dtype=transport(ckpt.info(key).dtype)),
            shape,
            ckpt.info(key).shape,
            offset,
        )
        for key, (offset, shape) in boxes.items()
    }
    # Paddle opens the files by name (through the scratch links): they must still be
    # the files whose headers planned the boxes, before its reads and after them.
    files = sorted({ckpt.info(k).file for k in boxes})
    ckpt.check_files(files)
    with scratch_checkpoint(ckpt) as scratch, uint8_transport(), quiet_paddle():
        lsd._metadata_manager.clear()
        try:
            lsd.load_state_dict_impl(
                targets,
                scratch,
                process_group=process_group,
                offload=offload,
                safetensors=True,
                **options,
            )
        finally:
            lsd._metadata_manager.clear()
            lsd.PATH_TO_CHECKPOINT_FILES.pop(scratch, None)
    ckpt.check_files(files)
    return [
        {
            key: _crop(targets[key].local_tensor, boxes[key], box)
            for key, box in plan.source_slices.items()
        }
        for plan in plans
    ]


def _crop(tensor: Any, have: Box, want: Box) -> Any:
    """The ``want`` box out of a tensor holding the ``have`` box."""
    if have == want:
        return tensor
    import paddle

    starts = [w - h for w, h in zip(want[0], have[0], strict=True)]
    ends = [s + n for s, n in zip(starts, want[1], strict=True)]
    return paddle.slice(tensor, axes=list(range(len(starts))), starts=starts, ends=ends)
