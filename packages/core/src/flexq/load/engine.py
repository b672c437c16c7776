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
import math
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from flexq.errors import FlexqError
from flexq.load import native
from flexq.load.pieces import plan_pieces
from flexq.load.report import LoadOptions, LoadReport
from flexq.load.sources import FLEXCHECKPOINT_DTYPES, DirectSource, FlexCheckpointSource, Source
from flexq.load.targets import describe
from flexq.load.write import fill

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flexq.composition import Composition

log = logging.getLogger("flexq")
EngineName = Literal["auto", "native", "flexcheckpoint", "direct"]
DEFAULT_MAX_INFLIGHT = 1 << 30
_announced: set[tuple[str, str]] = set()


class Engine(Protocol):
    """Loads a composed checkpoint into targets."""

    def load(
        self, ct: Composition, state_dict: Mapping[str, Any], options: LoadOptions
    ) -> LoadReport:
        """Fill ``state_dict``'s tensors in place."""


def choose(
    name: str, ct: Composition, state_dict: Mapping[str, Any], options: LoadOptions
) -> Engine:
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
        chosen, why = _auto(ct, has_native, paddle, state_dict)
        if (chosen, why) not in _announced:
            _announced.add((chosen, why))
            # DEBUG: Paddle gives the root logger an INFO handler of its own, so at INFO
            # every API load printed this line in Paddle's format (`flexq --debug` shows it).
            log.debug("flexq: engine %r (%s)", chosen, why)
    if chosen == "native":
        return NativeEngine()
    return FlexqEngine(DirectSource if chosen == "direct" else FlexCheckpointSource)


def _auto(ct: Composition, has_native: bool, paddle: Any, state_dict: Any) -> tuple[str, str]:
    ranks = paddle.distributed.get_world_size()
    # 3.3.1's reshard communicators (which Paddle's load_transform path uses too)
    # call .cuda() unconditionally: with several processes on a CPU-only build they
    # cannot run.
    cpu_only = not paddle.is_compiled_with_cuda() and not paddle.device.get_all_custom_device_type()
    tensors = ct.checkpoint.tensors
    carried = all(
        tensors[s].dtype in FLEXCHECKPOINT_DTYPES for e in ct.entries.values() for s in e.sources
    )
    if has_native and carried and not (ranks > 1 and cpu_only):
        return "native", "Paddle has load_transform"
    if ranks == 1:
        return "direct", "one process: direct reads are the fastest"
    if cpu_only:
        return "direct", "several ranks on a CPU-only Paddle build"
    if not carried:
        return "direct", "the checkpoint has element formats Paddle's loader cannot carry"
    if replicated_share(state_dict) > 0.5:
        return "flexcheckpoint", (
            "several ranks with mostly replicated targets: each file is read once and broadcast"
        )
    return "direct", "several ranks with sharded targets: each rank reads only its boxes"


def replicated_share(state_dict: Any) -> float:
    """Share of target elements every rank holds whole (the same on every rank of one
    model, so ranks agree on the engine without communicating)."""
    total = whole = 0
    for t in describe(state_dict):
        n = math.prod(t.global_shape)
        total += n
        whole += n if t.local_shape == t.global_shape else 0
    return whole / total if total else 0.0


@dataclass(frozen=True)
class FlexqEngine:
    """flexq's own pipeline over one kind of source: plan every piece, then fill the
    targets from a source opened over those plans."""

    source: type[Source]

    def load(
        self, ct: Composition, state_dict: Mapping[str, Any], options: LoadOptions
    ) -> LoadReport:
        pieces = plan_pieces(ct, describe(state_dict), options)
        return fill(ct, pieces, self.source, options)


class NativeEngine:
    """Paddle's own ``load_state_dict(..., load_transform=...)`` with the composed
    transform, after the same validation as flexq's own engines (:mod:`flexq.load.native`)."""

    name = "native"

    def load(
        self, ct: Composition, state_dict: Mapping[str, Any], options: LoadOptions
    ) -> LoadReport:
        targets = describe(state_dict)
        # Paddle reads whole AOA boxes itself: validate them uncut.
        pieces = plan_pieces(ct, targets, replace(options, max_inflight_bytes=sys.maxsize))
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
        casts = tuple(dict.fromkeys(p.cast for p in pieces if p.cast is not None))
        return LoadReport(self.name, len(pieces), rounds, ct.checkpoint.bytes_read, 0, casts)
