"""``flexq.load_state_dict``: load a quantized (or plain) checkpoint into Paddle tensors in place.

For users of Paddle models. On a Paddle whose ``load_state_dict`` takes
``load_transform=`` the composed transform is handed to it. On Paddle 3.3.1 the
same pipeline is assembled from 3.3.1's parts: its ``AOAEngine`` maps target
shards to boxes of logical tensors (:mod:`flexq.mapping`), the owner format
plans and dequantizes each box, and 3.3.1's ``assign_sharded_slice`` applies
AOA's transposes while writing into the target.

Every target, mapping and read plan is validated before the first write, and
results are staged per batch of at most ``max_inflight_bytes``; when a load
spans several batches, the old contents of written regions are kept so a
failure restores them. A failed load leaves every target as it was.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from flexq import fcfetch
from flexq.arrays import host_to_numpy, host_view, to_paddle
from flexq.compose import ComposedTransform, compose
from flexq.errors import FlexqError
from flexq.mapping import Piece, check_shapes, map_targets
from flexq.plan import ReadPlan, TargetSlice
from flexq.targets import describe

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

log = logging.getLogger("flexq")
Engine = Literal["auto", "native", "flexcheckpoint", "direct"]
DEFAULT_MAX_INFLIGHT = 1 << 30
_announced: set[tuple[str, str]] = set()


def load_state_dict(
    state_dict: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    aoa_config: dict[str, Any] | None = None,
    formats: list[str] | None = None,
    engine: Engine = "auto",
    process_group: Any = None,
    offload: bool = False,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT,
    atomic: bool = True,
    **flexcheckpoint_options: Any,
) -> LoadReport:
    """Load the checkpoint at ``path`` into the tensors of ``state_dict``, in place.

    :param state_dict: target tensors (plain, dist tensors, ShardedWeight, nested dicts).
        Parameters without storage (created under ``paddle.LazyGuard``) are
        allocated once every check has passed, then filled.
    :param aoa_config: ``{"aoa_statements": [...]}`` over logical tensor names.
    :param formats: format names to use (default: every installed format).
    :param engine: ``"native"`` (Paddle's own ``load_transform``),
        ``"flexcheckpoint"`` (components fetched through Paddle's loader and
        resharder: files balanced over ranks, each read once), ``"direct"`` (each
        rank reads exactly its plan slices from the files, no collective
        communication), or ``"auto"``: native, else flexcheckpoint, else direct
        where Paddle's communicators cannot run (several ranks, CPU-only build).
    :param max_inflight_bytes: bound on dequantized float32 bytes staged at once.
    :param atomic: when the load needs several batches, keep a host-memory copy of
        every region written before the last batch, so a failure in a later batch
        (a plugin error, a corrupt block) restores it. Costs host memory up to the
        size of the targets (device memory stays targets plus one batch); False
        bounds host memory too, and a failure part-way then leaves the earlier
        batches written.
    :return: what the load did (engine, pieces, bytes read by this rank).
    :raises FlexqError: on any problem; with ``atomic`` the targets are then unchanged.
    """
    ct = compose(path, formats)
    chosen = _choose(engine, ct)
    if chosen == "native":
        _native(ct, state_dict, aoa_config, process_group, offload, flexcheckpoint_options)
        return LoadReport(chosen, 0, 0, ct.checkpoint.bytes_read, 0)
    targets = describe(state_dict)
    pieces = map_targets(ct, targets, aoa_config)
    check_shapes(pieces)
    pieces = [part for p in pieces for part in p.split(max_inflight_bytes)]
    plans = [ct.plan(p.logical_key, _box(ct, p)) for p in pieces]
    fetched: list[dict[str, Any]] | None = None
    if chosen == "flexcheckpoint":
        # One collective call for every rank's plans: ranks may need different numbers
        # of batches, and 3.3.1 reads whole files per rank anyway.
        fetched = fcfetch.fetch(
            ct.checkpoint, plans, process_group, offload, **flexcheckpoint_options
        )
    batches = list(_batches(list(range(len(pieces))), pieces, max_inflight_bytes))
    # Every check has passed: only now do lazy targets get their storage (filled below).
    for t in targets:
        if t.lazy:
            t.allocate()
    undo: list[tuple[Piece, Any]] = []
    scratch = _Scratch()
    try:
        for n, batch in enumerate(batches):
            staged = []
            for i in batch:
                sources = fetched[i] if fetched is not None else None
                # Without atomicity a format may decode straight into the target.
                into = None if atomic else _host_region(pieces[i])
                value = _dequantize(ct, pieces[i], plans[i], sources, into, scratch)
                if into is None or not np.may_share_memory(value, into):
                    staged.append((pieces[i], value))
            # Everything of a batch is staged before its first write, so only the
            # batches written before a later failure need restoring.
            keep = atomic and n < len(batches) - 1
            for piece, value in staged:
                if keep:
                    undo.append((piece, _host_copy(_region(piece))))
                _write(piece, value)
            del staged
            # This batch's sources are done: let their file pages go from resident
            # memory, so it stays bounded by one batch however large the checkpoint.
            ct.checkpoint.unmap_pages()
    except BaseException:
        for piece, old in reversed(undo):
            _write(piece, old.to(piece.target.tensor.place), transposed=False)
        raise
    planned = sum(
        ct.checkpoint.box_bytes(key, shape)
        for plan in plans
        for key, (_, shape) in plan.source_slices.items()
    )
    casts = sorted(
        {
            f"{p.logical_key}: {e.dtype} -> {p.target.dtype}"
            for p in pieces
            if (e := ct.entry(p.logical_key)).owner is None and e.dtype != p.target.dtype
        }
    )
    return LoadReport(
        chosen, len(pieces), len(batches), ct.checkpoint.bytes_read, planned, tuple(casts)
    )


@dataclass(frozen=True)
class LoadReport:
    """What one :func:`load_state_dict` call did on this rank.

    :ivar bytes_read: bytes this rank read from the checkpoint files itself
        (the direct engine; Paddle's loader does its own reads).
    :ivar planned_bytes: bytes of the source boxes this rank's read plans name.
    :ivar casts: unquantized tensors cast to their target's dtype, as
        ``"key: checkpoint dtype -> target dtype"``.
    """

    engine: str
    pieces: int
    batches: int
    bytes_read: int
    planned_bytes: int
    casts: tuple[str, ...] = ()


def _choose(engine: str, ct: ComposedTransform) -> str:
    """The engine to run: as asked, or for "auto" the best one this Paddle supports."""
    import paddle
    from paddle.distributed.flex_checkpoint.dcp.load_state_dict import (
        load_state_dict as paddle_load,
    )

    native = "load_transform" in inspect.signature(paddle_load).parameters
    if engine not in ("auto", "native", "flexcheckpoint", "direct"):
        raise FlexqError(
            f"unknown engine {engine!r}: use 'auto', 'native', 'flexcheckpoint' or 'direct'"
        )
    if engine == "native" and not native:
        raise FlexqError("engine 'native' needs a Paddle whose load_state_dict has load_transform")
    if engine != "auto":
        return engine
    # 3.3.1's reshard communicators call .cuda() unconditionally: with several
    # processes on a CPU-only build they cannot run, so read directly instead.
    cpu_only = not paddle.is_compiled_with_cuda() and not paddle.device.get_all_custom_device_type()
    components = {s for e in ct.entries.values() for s in e.sources}
    if native:
        chosen, why = "native", "Paddle has load_transform"
    elif paddle.distributed.get_world_size() > 1 and cpu_only:
        chosen, why = "direct", "several ranks on a CPU-only Paddle build"
    elif not fcfetch.transportable(ct.checkpoint, components):
        chosen, why = "direct", "the checkpoint has element formats FlexCheckpoint cannot carry"
    else:
        chosen, why = "flexcheckpoint", "Paddle has no load_transform"
    if (chosen, why) not in _announced:
        _announced.add((chosen, why))
        log.info("flexq: engine %r (%s)", chosen, why)
    return chosen


def _native(
    ct: ComposedTransform,
    state_dict: Mapping[str, Any],
    aoa_config: dict[str, Any] | None,
    process_group: Any,
    offload: bool,
    options: dict[str, Any],
) -> None:
    from paddle.distributed.flex_checkpoint.dcp.load_state_dict import (
        load_state_dict as paddle_load,
    )

    paddle_load(
        dict(state_dict),
        # The resolved directory: a repo id's cache snapshot, not the id.
        os.fspath(ct.checkpoint.path),
        process_group=process_group,
        offload=offload,
        aoa_config=aoa_config,
        safetensors=True,
        load_transform=ct,
        **options,
    )


def _box(ct: ComposedTransform, p: Piece) -> TargetSlice:
    return TargetSlice(
        ct.entry(p.logical_key).shape,
        tuple(p.src_desc.local_shape),
        tuple(p.src_desc.global_offset),
        p.target.dtype,
    )


def _batches(indexes: list[int], pieces: list[Piece], limit: int) -> Iterator[list[int]]:
    """Indexes of pieces, grouped so each group's float32 bytes stay under ``limit``."""
    batch: list[int] = []
    size = 0
    for i in indexes:
        if batch and size + pieces[i].nbytes > limit:
            yield batch
            batch, size = [], 0
        batch.append(i)
        size += pieces[i].nbytes
    if batch:
        yield batch


def _dequantize(
    ct: ComposedTransform,
    p: Piece,
    plan: ReadPlan,
    sources: dict[str, Any] | None,
    into: np.ndarray | None,
    scratch: _Scratch,
) -> Any:
    """Dequantize one piece from fetched sources (or from direct reads when None),
    writing into ``into`` (the piece's own target region) where it can."""
    found = ct.read_sources(p.logical_key, plan) if sources is None else host_to_numpy(sources)
    on_host = _host_view(p.target.tensor) is not None
    work = None
    if on_host and p.target.dtype != "float32":
        work = scratch.get(tuple(int(d) for d in p.src_desc.local_shape))
    # numpy results for host targets are copied in once by _write; others go to Paddle.
    value = ct.dequantize(p.logical_key, found, plan, p.target.dtype, out=into, scratch=work)
    return value if on_host else to_paddle(value, p.target.dtype)


class _Scratch:
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


def _region(p: Piece) -> Any:
    """The slice of the target tensor that ``p`` writes (a view)."""
    import paddle

    box = _target_box(p)
    return paddle.slice(
        p.target.tensor,
        axes=list(range(len(box))),
        starts=[b.start for b in box],
        ends=[b.stop for b in box],
    )


def _host_copy(t: Any) -> Any:
    """A copy of ``t`` in host memory (device memory stays bounded by one batch)."""
    return t.clone() if t.place.is_cpu_place() else t.cpu()


def _host_view(tensor: Any) -> np.ndarray | None:
    """A writable numpy view of a float host tensor's memory (bfloat16 as uint16 bits),
    or None (device tensors, other dtypes: written through Paddle)."""
    import paddle

    if tensor.dtype not in (paddle.float32, paddle.float16, paddle.bfloat16):
        return None
    return host_view(tensor, writable=True)


def _host_region(p: Piece) -> np.ndarray | None:
    """The piece's target region as a C-contiguous numpy view (float32, bfloat16 as
    uint16 bits, float16), if it has one and AOA does not transpose it."""
    view = _host_view(p.target.tensor)
    if view is None or p.transposes:
        return None
    region = view[_target_box(p)]
    return region if region.flags.c_contiguous else None


def _target_box(p: Piece) -> tuple[slice, ...]:
    """The piece's region as slices of the target's local tensor."""
    start = [d - t for d, t in zip(p.dst_desc.global_offset, p.target.offset, strict=True)]
    return tuple(slice(o, o + n) for o, n in zip(start, p.dst_desc.local_shape, strict=True))


def _write(p: Piece, value: Any, transposed: bool = True) -> None:
    """Write ``value`` (the piece's logical box, or an undo copy) into its target region."""
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight
    from paddle.distributed.flex_checkpoint.dcp.utils import assign_sharded_slice

    view = _host_view(p.target.tensor) if isinstance(value, np.ndarray) else None
    if view is not None:
        # One copy straight into the target's memory, AOA's transposes as numpy views.
        src = np.transpose(value, p.axes) if transposed and p.transposes else value
        region = view[_target_box(p)]
        np.copyto(region, src.view(view.dtype) if src.dtype != view.dtype else src)
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
