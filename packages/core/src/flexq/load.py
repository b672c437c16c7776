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
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from flexq.arrays import to_paddle
from flexq.compose import ComposedTransform, compose
from flexq.errors import FlexqError
from flexq.mapping import Piece, check_shapes, map_targets
from flexq.plan import ReadPlan, TargetSlice
from flexq.targets import describe

log = logging.getLogger("flexq")
Engine = Literal["auto", "native", "direct"]
DEFAULT_MAX_INFLIGHT = 1 << 30
_announced: set[str] = set()


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
    **flexcheckpoint_options: Any,
) -> LoadReport:
    """Load the checkpoint at ``path`` into the tensors of ``state_dict``, in place.

    :param state_dict: target tensors (plain, dist tensors, ShardedWeight, nested dicts).
    :param aoa_config: ``{"aoa_statements": [...]}`` over logical tensor names.
    :param formats: format names to use (default: every installed format).
    :param engine: ``"native"`` (Paddle's own ``load_transform``), ``"direct"``
        (each rank reads exactly its plan slices from the files, no collective
        communication), or ``"auto"`` (native where Paddle has it, else direct).
    :param max_inflight_bytes: bound on dequantized float32 bytes staged at once.
    :return: what the load did (engine, pieces, bytes read by this rank).
    :raises FlexqError: on any problem; the targets are then unchanged.
    """
    ct = compose(path, formats)
    chosen = _choose(engine)
    if chosen == "native":
        _native(ct, state_dict, path, aoa_config, process_group, offload, flexcheckpoint_options)
        return LoadReport(chosen, 0, 0, ct.checkpoint.bytes_read)
    targets = describe(state_dict)
    pieces = map_targets(ct, targets, aoa_config)
    check_shapes(pieces)
    plans = [ct.plan(p.logical_key, _box(ct, p)) for p in pieces]
    batches = list(_batches(pieces, plans, max_inflight_bytes))
    undo: list[tuple[Piece, Any]] = []
    try:
        for batch in batches:
            staged = [(p, _dequantize(ct, p, plan)) for p, plan in batch]
            for piece, value in staged:
                if len(batches) > 1:
                    undo.append((piece, _region(piece).clone()))
                _write(piece, value)
    except BaseException:
        for piece, old in reversed(undo):
            _write(piece, old, transposed=False)
        raise
    return LoadReport(chosen, len(pieces), len(batches), ct.checkpoint.bytes_read)


@dataclass(frozen=True)
class LoadReport:
    """What one :func:`load_state_dict` call did on this rank.

    :ivar bytes_read: bytes this rank read from the checkpoint files.
    """

    engine: str
    pieces: int
    batches: int
    bytes_read: int


def _choose(engine: str) -> str:
    from paddle.distributed.flex_checkpoint.dcp.load_state_dict import (
        load_state_dict as paddle_load,
    )

    native = "load_transform" in inspect.signature(paddle_load).parameters
    if engine == "auto":
        chosen = "native" if native else "direct"
        if chosen not in _announced:
            _announced.add(chosen)
            why = "Paddle has load_transform" if native else "Paddle has no load_transform"
            log.info("flexq: engine %r (%s)", chosen, why)
        return chosen
    if engine == "native" and not native:
        raise FlexqError("engine 'native' needs a Paddle whose load_state_dict has load_transform")
    if engine not in ("native", "direct"):
        raise FlexqError(f"unknown engine {engine!r}: use 'auto', 'native' or 'direct'")
    return engine


def _native(
    ct: ComposedTransform,
    state_dict: Mapping[str, Any],
    path: str | os.PathLike[str],
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
        os.fspath(path),
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


def _batches(
    pieces: list[Piece], plans: list[ReadPlan], limit: int
) -> Iterator[list[tuple[Piece, ReadPlan]]]:
    batch: list[tuple[Piece, ReadPlan]] = []
    size = 0
    for piece, plan in zip(pieces, plans, strict=True):
        if batch and size + piece.nbytes > limit:
            yield batch
            batch, size = [], 0
        batch.append((piece, plan))
        size += piece.nbytes
    if batch:
        yield batch


def _dequantize(ct: ComposedTransform, p: Piece, plan: ReadPlan) -> Any:
    sources = ct.read_sources(p.logical_key, plan)
    return to_paddle(ct.dequantize(p.logical_key, sources, plan, p.target.dtype), p.target.dtype)


def _region(p: Piece) -> Any:
    """The slice of the target tensor that ``p`` writes (a view)."""
    import paddle

    offset = [d - t for d, t in zip(p.dst_desc.global_offset, p.target.offset, strict=True)]
    shape = p.dst_desc.local_shape
    axes = list(range(len(shape)))
    return paddle.slice(
        p.target.tensor,
        axes=axes,
        starts=offset,
        ends=[o + s for o, s in zip(offset, shape, strict=True)],
    )


def _write(p: Piece, value: Any, transposed: bool = True) -> None:
    """Write ``value`` (the piece's logical box, or an undo copy) into its target region."""
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight
    from paddle.distributed.flex_checkpoint.dcp.utils import assign_sharded_slice

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
