"""``flexq.load_state_dict``: load a quantized (or plain) checkpoint into Paddle tensors in place.

For users of Paddle models: one call composes the installed formats over the
checkpoint and runs the engine that suits the situation
(:mod:`flexq.load.engine`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from flexq.load import kept, kept_read
from flexq.load.agree import compose_on_every_rank, on_every_rank
from flexq.load.engine import DEFAULT_MAX_INFLIGHT, EngineName, NativeEngine, choose
from flexq.load.kept_chains import for_ordinary
from flexq.load.progress import read_progress
from flexq.load.report import LoadOptions, LoadReport
from flexq.load.targets import flatten

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

    from flexq.composition import Composition


def load_state_dict(
    state_dict: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    aoa_config: dict[str, Any] | None = None,
    formats: list[str] | None = None,
    engine: EngineName = "auto",
    process_group: Any = None,
    offload: bool = False,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT,
    atomic: bool = False,
    allow_unclaimed: bool = False,
    progress: bool = False,
    **flexcheckpoint_options: Any,
) -> LoadReport:
    """Load the checkpoint at ``path`` into the tensors of ``state_dict``, in place.

    :param state_dict: target tensors (plain, dist tensors, ShardedWeight, nested dicts),
        and :class:`flexq.QuantizedTarget` for logical keys loaded as they are stored
        (kept forms, :mod:`flexq.load.kept`; ``aoa_config`` renames, fuses and
        transposes them where that stays exact, :mod:`flexq.load.kept_boxes`).
        Parameters without storage (created under ``paddle.LazyGuard``) are
        allocated once every check has passed, then filled.
    :param aoa_config: ``{"aoa_statements": [...]}`` over logical tensor names.
    :param formats: format names to use (default: every installed format).
    :param engine: ``"direct"`` (each rank reads exactly its plan slices from the
        files, no collective communication), ``"flexcheckpoint"`` (components
        fetched through Paddle's loader and resharder: files balanced over ranks,
        each read once, boxes broadcast), ``"native"`` (Paddle's own
        ``load_transform``), or ``"auto"``: native where Paddle has it (not on
        several ranks of a CPU-only build, nor for F4 components); else
        direct, except on several ranks with mostly replicated targets and
        collective communication, where flexcheckpoint keeps every rank from
        reading everything. The choice is logged once, with the reason.
    :param max_inflight_bytes: bound on dequantized float32 bytes staged at once
        (the size pieces of one tensor are cut to).
    :param atomic: also restore every target when decoding itself fails (a
        plugin error part-way) or the load is interrupted (KeyboardInterrupt; one
        that comes while the last batch is being written waits for the load to
        complete instead, so the targets are all old or all new, never a mix):
        each batch is staged whole before it is written
        and the regions earlier batches wrote are copied to host memory first,
        which costs host memory up to the size of the targets. Without it (the
        default) every error metadata and scales can reveal (shapes, plans,
        missing or orphaned components, non-finite scales under
        ``FLEXQ_NONFINITE_SCALES=error``, truncated files) is still raised before
        the first write, and memory above the targets stays near one tensor.
    :param allow_unclaimed: load tensors that look quantized but that no
        installed format claims as they are (see :func:`flexq.compose`).
    :param progress: show a bar of the bytes read on stderr (rich; off by default, as
        a library should be; ``flexq.paddleformers.from_pretrained`` turns it on).
    :return: what the load did (engine, pieces, bytes read by this rank, casts).

    On several ranks every rank opens the checkpoint from its own ``path`` (a node
    may hold its own copy). A rank that cannot (a file missing from its copy), or
    whose kept targets fail their checks (a shard that cuts a block), stops before
    any read or write with an error naming the rank; with an engine that
    communicates, every rank raises that error, naming every rank that failed.
    :raises FlexqError: on any problem; targets are then unchanged, except after a
        failure only decoding reveals in a non-``atomic`` load.
    """
    ct = compose_on_every_rank(
        path, formats, allow_unclaimed=allow_unclaimed, engine=engine, process_group=process_group
    )
    options = LoadOptions(
        aoa_config, max_inflight_bytes, atomic, process_group, offload, flexcheckpoint_options
    )
    try:
        with read_progress(ct.checkpoint, progress):
            kept_targets, rest = kept.split(flatten(state_dict))
            if not kept_targets:
                return choose(engine, ct, state_dict, options).load(ct, state_dict, options)
            pieces = on_every_rank(
                lambda: kept.plan(ct, kept_targets, options),
                engine=engine,
                process_group=process_group,
                advice=_KEPT,
            )
            return _load_with_kept(ct, pieces, rest, engine, options)
    finally:
        ct.checkpoint.close()  # the load's own compose: its files go with it


#: Why a kept target's refusal stops the load, and what to do (see :mod:`flexq.load.agree`).
_KEPT = (
    "Every rank checks its kept targets before any rank reads: shard every rank's "
    "quantized weights on block boundaries",
    "its kept targets were checked before any read: shard quantized weights on block boundaries",
)


def _load_with_kept(
    ct: Composition,
    pieces: list[kept.KeptPiece],
    rest: dict[Any, Any],
    engine: EngineName,
    options: LoadOptions,
) -> LoadReport:
    """One load of kept and ordinary targets: the kept targets' metadata checks ran
    (``pieces``); their data checks run once the ordinary targets' checks have passed
    and before their first write, and the kept targets are written last, so a failure
    of either kind before that leaves every target as it was. Kept boxes are read
    straight from the files (each rank its own blocks) whichever engine runs."""
    checked: list[kept_read.KeptScales] = []
    checked_bytes: list[int] = []
    counter = ct.checkpoint

    def check_kept() -> None:
        start = counter.bytes_read
        checked.extend(kept_read.check(ct, pieces))
        checked_bytes.append(counter.bytes_read - start)

    report = LoadReport("kept", 0, 0, 0, 0)
    if rest:
        options = for_ordinary(options, [p.key for p in pieces], [str(k) for k in rest])
        chosen = choose(engine, ct, rest, options)
        if isinstance(chosen, NativeEngine):
            check_kept()  # Paddle's own loader has no hook before its first write
            report = chosen.load(ct, rest, options)
        else:
            report = chosen.load(ct, rest, replace(options, before_write=check_kept))
    if not checked_bytes:
        check_kept()  # no ordinary targets (or no piece of theirs to write)
    before_write = counter.bytes_read
    kept_read.write(ct, checked)
    kept_bytes = counter.bytes_read - before_write
    if report.engine in ("flexcheckpoint", "kept"):
        # its report counts the boxes Paddle delivered, not flexq's own kept reads
        kept_bytes += sum(checked_bytes)
    return replace(
        report, pieces=report.pieces + len(pieces), bytes_read=report.bytes_read + kept_bytes
    )
