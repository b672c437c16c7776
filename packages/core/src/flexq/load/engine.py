"""The load engines: which one runs, and the batch loop that decodes and writes.

For :func:`flexq.load_state_dict`. :func:`choose` picks an engine for the
situation and says why once. :class:`FlexqEngine` is flexq's own pipeline
assembled from Paddle 3.3.1's parts over a :class:`~flexq.load.sources.Source`:
AOA maps target shards to boxes of logical tensors, the owner format plans each
box, the source fetches the planned boxes, the owner dequantizes them and the
result is written into the target. :class:`NativeEngine` hands the composed
transform to a Paddle whose ``load_state_dict`` takes ``load_transform=``.

Every target, mapping and read plan is validated before the first write, and
results are staged per batch of at most ``max_inflight_bytes``; with
``atomic`` the old contents of written regions are kept while a load spans
several batches, so a failure restores them.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from flexq.errors import FlexqError
from flexq.formatkit.rounding import to_paddle
from flexq.load import native, write
from flexq.load import sources as sources_mod
from flexq.load.aoa import Piece, map_targets
from flexq.load.sources import DirectSource, FlexCheckpointSource, Source
from flexq.load.targets import describe

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from flexq.compose import ComposedTransform
    from flexq.plan import ReadPlan

log = logging.getLogger("flexq")
EngineName = Literal["auto", "native", "flexcheckpoint", "direct"]
DEFAULT_MAX_INFLIGHT = 1 << 30
_announced: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class LoadReport:
    """What one :func:`flexq.load_state_dict` call did on this rank.

    :ivar bytes_read: bytes of source boxes this rank read (direct engine: from
        the files itself; flexcheckpoint: the boxes Paddle's loader delivered).
    :ivar planned_bytes: bytes of the source boxes this rank's read plans name.
    :ivar casts: (target key, checkpoint dtype, target dtype) of every plain
        tensor cast to its target's dtype.
    """

    engine: str
    pieces: int
    batches: int
    bytes_read: int
    planned_bytes: int
    casts: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class LoadOptions:
    """The caller's settings for one load."""

    aoa_config: dict[str, Any] | None
    max_inflight_bytes: int
    atomic: bool
    process_group: Any
    offload: bool
    paddle_options: dict[str, Any]


class Engine(Protocol):
    """Loads a composed checkpoint into targets."""

    def load(
        self, ct: ComposedTransform, state_dict: Mapping[str, Any], options: LoadOptions
    ) -> LoadReport:
        """Fill ``state_dict``'s tensors in place."""


def choose(name: str, ct: ComposedTransform, options: LoadOptions) -> Engine:
    """The engine to run: as asked, or for "auto" the best one this Paddle supports."""
    import paddle
    from paddle.distributed.flex_checkpoint.dcp.load_state_dict import (
        load_state_dict as paddle_load,
    )

    has_native = "load_transform" in inspect.signature(paddle_load).parameters
    if name not in ("auto", "native", "flexcheckpoint", "direct"):
        raise FlexqError(
            f"unknown engine {name!r}: use 'auto', 'native', 'flexcheckpoint' or 'direct'"
        )
    if name == "native" and not has_native:
        raise FlexqError("engine 'native' needs a Paddle whose load_state_dict has load_transform")
    chosen = name
    if name == "auto":
        chosen, why = _auto(ct, has_native, paddle)
        if (chosen, why) not in _announced:
            _announced.add((chosen, why))
            log.info("flexq: engine %r (%s)", chosen, why)
    if chosen == "native":
        return NativeEngine()
    if chosen == "direct":
        return FlexqEngine(DirectSource(ct))
    return FlexqEngine(
        FlexCheckpointSource(ct, options.process_group, options.offload, options.paddle_options)
    )


def _auto(ct: ComposedTransform, has_native: bool, paddle: Any) -> tuple[str, str]:
    # 3.3.1's reshard communicators (which Paddle's load_transform path uses too)
    # call .cuda() unconditionally: with several processes on a CPU-only build they
    # cannot run, so read directly instead.
    cpu_only = not paddle.is_compiled_with_cuda() and not paddle.device.get_all_custom_device_type()
    components = {s for e in ct.entries.values() for s in e.sources}
    if paddle.distributed.get_world_size() > 1 and cpu_only:
        return "direct", "several ranks on a CPU-only Paddle build"
    if not sources_mod.transportable(ct.checkpoint, components):
        return "direct", "the checkpoint has element formats Paddle's loader cannot carry"
    if has_native:
        return "native", "Paddle has load_transform"
    return "flexcheckpoint", "Paddle has no load_transform"


class FlexqEngine:
    """flexq's own pipeline over one source of boxes."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def load(
        self, ct: ComposedTransform, state_dict: Mapping[str, Any], options: LoadOptions
    ) -> LoadReport:
        pieces = map_targets(ct, describe(state_dict), options.aoa_config)
        pieces = [part for p in pieces for part in p.split(options.max_inflight_bytes)]
        plans = [ct.plan(p.logical_key, p.box()) for p in pieces]
        self.source.prepare(plans)
        batches = list(_batches(pieces, options.max_inflight_bytes))
        undo: list[tuple[Piece, Any]] = []
        scratch = write.Scratch()
        try:
            for n, batch in enumerate(batches):
                staged = []
                for i in batch:
                    # Without atomicity a format may decode straight into the target.
                    into = None if options.atomic else write.host_region(pieces[i])
                    value = self._dequantize(ct, pieces[i], plans[i], i, into, scratch)
                    if into is None or not np.may_share_memory(value, into):
                        staged.append((pieces[i], value))
                # Everything of a batch is staged before its first write, so only the
                # batches written before a later failure need restoring.
                keep = options.atomic and n < len(batches) - 1
                for piece, value in staged:
                    if keep:
                        undo.append((piece, write.host_copy(write.region(piece))))
                    write.write(piece, value)
                del staged
                self.source.release()
        except BaseException:
            for piece, old in reversed(undo):
                write.write(piece, old.to(piece.target.tensor.place), transposed=False)
            raise
        return LoadReport(
            self.source.name,
            len(pieces),
            len(batches),
            self.source.bytes_read,
            _planned_bytes(ct, plans),
            _casts(ct, pieces),
        )

    def _dequantize(
        self,
        ct: ComposedTransform,
        p: Piece,
        plan: ReadPlan,
        index: int,
        into: np.ndarray | None,
        scratch: write.Scratch,
    ) -> Any:
        """Dequantize one piece, writing into ``into`` (its own target region) where it can."""
        found = self.source.boxes(index, plan)
        on_host = write.target_view(p.target.tensor) is not None
        work = None
        if on_host and p.target.dtype != "float32":
            work = scratch.get(tuple(int(d) for d in p.src_desc.local_shape))
        # numpy results for host targets are copied in once by write(); others go to Paddle.
        value = ct.dequantize(p.logical_key, found, plan, p.target.dtype, out=into, scratch=work)
        return value if on_host else to_paddle(value, p.target.dtype)


class NativeEngine:
    """Paddle's own ``load_state_dict(..., load_transform=...)`` with the composed
    transform, after the same validation as flexq's own engines (:mod:`flexq.load.native`)."""

    name = "native"

    def load(
        self, ct: ComposedTransform, state_dict: Mapping[str, Any], options: LoadOptions
    ) -> LoadReport:
        targets = describe(state_dict)
        pieces = map_targets(ct, targets, options.aoa_config)
        rounds = native.load(
            ct,
            targets,
            pieces,
            options.aoa_config,
            options.process_group,
            options.offload,
            options.atomic,
            options.paddle_options,
        )
        return LoadReport(
            self.name, len(pieces), rounds, ct.checkpoint.bytes_read, 0, _casts(ct, pieces)
        )


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


def _planned_bytes(ct: ComposedTransform, plans: list[ReadPlan]) -> int:
    return sum(
        ct.checkpoint.box_bytes(key, shape)
        for plan in plans
        for key, (_, shape) in plan.source_slices.items()
    )


def _casts(ct: ComposedTransform, pieces: list[Piece]) -> tuple[tuple[str, str, str], ...]:
    seen: dict[str, tuple[str, str, str]] = {}
    for p in pieces:
        entry = ct.entry(p.logical_key)
        if entry.is_passthrough and entry.dtype != p.target.dtype:
            seen.setdefault(p.target.key, (p.target.key, entry.dtype, p.target.dtype))
    return tuple(seen.values())
