"""The ``"native"`` engine's load: Paddle's own ``load_state_dict(..., load_transform=...)``.

For Paddle builds whose ``load_state_dict`` takes ``load_transform=`` (PR
#79712). flexq validates the load as its other engines do, then hands Paddle
the composed transform with what Paddle's loader needs to give the same bits:

- every target wrapped as a ShardedWeight over its local value (Paddle applies
  AOA only when every target is one; a dist tensor becomes its local shard);
- the composition wrapped in the :class:`flexq.ComposedTransform` adapter, given the
  plans the validation made (Paddle's ``read_plan`` of the same box asks no format again);
- the logical dtypes declared as the dtypes of the targets they feed (Paddle's
  AOA refuses a logical dtype that differs from the target's without a cast;
  declaring the target's dtype keeps one rounding from float32);
- a scratch directory of symlinks with flexq's metadata as the path (Paddle
  writes generated metadata into the directory it is given);
- Paddle's exceptions raised again as :class:`FlexqError` naming the tensor.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from flexq.errors import FlexqError, TargetError
from flexq.interrupts import uninterrupted
from flexq.load import sources
from flexq.transform import ComposedTransform

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.load.pieces import Piece
    from flexq.load.targets import Target


def declared_dtypes(ct: Composition, pieces: list[Piece]) -> dict[str, str]:
    """Logical key -> the dtype of the targets it feeds (one per logical tensor)."""
    dtypes: dict[str, str] = {}
    for p in pieces:
        seen = dtypes.setdefault(p.logical_key, p.target.dtype)
        if seen != p.target.dtype:
            raise TargetError(
                f"{p.logical_key!r} ({ct.checkpoint.path}) feeds targets of dtypes {seen} and "
                f"{p.target.dtype} (target {p.target.key!r}); engine='native' needs one dtype "
                "per logical tensor: use engine='direct'"
            )
    return dtypes


def check_before_writing(ct: Composition, pieces: list[Piece]) -> None:
    """Run every piece's declared checks (scales, ``ReadPlan.checks``) before Paddle's
    loader writes anything, as flexq's own engines do: their boxes are small (scales,
    g_idx, code books) and read straight from this rank's files."""
    read = ct.checkpoint.read
    for p in pieces:
        plan = p.plan
        boxes = {k: read(k, *plan.source_slices[k]) for k in plan.checked}
        ct.check_plan(p.logical_key, plan, boxes)


def load(
    ct: Composition,
    targets: list[Target],
    pieces: list[Piece],
    aoa_config: dict[str, Any] | None,
    process_group: Any,
    offload: bool,
    atomic: bool,
    options: dict[str, Any],
) -> int:
    """Load ``targets`` (validated into ``pieces``) through Paddle's ``load_transform``.

    :param atomic: keep a copy of every target so a failure restores them all.
    :return: how many calls into Paddle it took (see :func:`rounds`).
    """
    from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd

    components = {s for p in pieces for s in ct.entry(p.logical_key).sources}
    bad = sorted(
        k for k in components if ct.checkpoint.info(k).dtype not in sources.FLEXCHECKPOINT_DTYPES
    )
    if bad:
        raise FlexqError(
            f"{ct.checkpoint.path}: {bad[0]!r} is {ct.checkpoint.info(bad[0]).dtype}, which "
            "Paddle's loader cannot transport; use engine='direct'"
        )
    dtypes = declared_dtypes(ct, pieces)
    check_before_writing(ct, pieces)
    saved = [(t.tensor, _host_copy(t.tensor)) for t in targets] if atomic else []
    with sources.scratch_checkpoint(ct.checkpoint) as scratch:
        batches = rounds(targets, pieces, process_group)
        # The adapter Paddle calls, told the plans validation made: Paddle's read_plan for
        # one of those boxes reuses it instead of asking the format a second time.
        transform = ComposedTransform(
            ct, declared=dtypes, planned=[(p.logical_key, p.box, p.plan) for p in pieces]
        )
        try:
            for batch in batches:
                lsd._metadata_manager.clear()
                lsd.load_state_dict(
                    _keyed(batch),
                    scratch,
                    process_group=process_group,
                    offload=offload,
                    aoa_config=aoa_config,
                    safetensors=True,
                    load_transform=transform,
                    **options,
                )
        except BaseException as exc:
            with uninterrupted():  # a second Ctrl-C must not stop a restore half-way
                for tensor, old in saved:
                    tensor.copy_(old.to(tensor.place), False)
            if isinstance(exc, FlexqError) or not isinstance(exc, Exception):
                raise
            raise FlexqError(
                f"{ct.checkpoint.path}: Paddle's load_transform failed loading "
                f"{_named(exc, targets, transform)}: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            lsd._metadata_manager.clear()
            lsd.PATH_TO_CHECKPOINT_FILES.pop(scratch, None)
    return len(batches)


def rounds(targets: list[Target], pieces: list[Piece], process_group: Any) -> list[list[Target]]:
    """The targets split into loads Paddle can do one at a time (the same split on every rank).

    Paddle's AOA loader keys what it reads by (logical key, offset of the box): two
    targets fed by boxes of one logical tensor that start at the same offset (say a
    rename and a transpose of it, or a Shard(0) and a Shard(1) copy on rank 0)
    would overwrite each other there and one would never be written. Such targets
    go to different rounds; a target key is in the same round on every rank.
    """
    import paddle.distributed as dist

    starts: dict[str, set[tuple[str, tuple[int, ...]]]] = {t.key: set() for t in targets}
    for p in pieces:
        starts[p.target.key].add((p.logical_key, tuple(int(o) for o in p.src_desc.global_offset)))
    per_rank = [starts]
    if dist.get_world_size() > 1:
        per_rank = []
        dist.all_gather_object(per_rank, starts, process_group)
    keys = sorted({k for rank in per_rank for k in rank})
    used: list[list[set[tuple[str, tuple[int, ...]]]]] = []  # round -> rank -> starts
    round_of: dict[str, int] = {}
    for key in keys:
        mine = [rank.get(key, set()) for rank in per_rank]
        n = next(
            (i for i, u in enumerate(used) if not any(a & b for a, b in zip(u, mine, strict=True))),
            len(used),
        )
        if n == len(used):
            used.append([set() for _ in per_rank])
        for u, m in zip(used[n], mine, strict=True):
            u |= m
        round_of[key] = n
    return [[t for t in targets if round_of[t.key] == n] for n in range(len(used))]


def _keyed(batch: list[Target]) -> dict[Any, Any]:
    """The batch as Paddle's loader takes it: keyed by name, or, where a rank holds
    several shards of one tensor, by FlexCheckpoint's ``(name, global_offset)``."""
    names = [t.key for t in batch]
    if len(set(names)) == len(names):
        return {t.key: t.sharded for t in batch}
    return {(t.key, t.offset): t.sharded for t in batch}


def _host_copy(t: Any) -> Any:
    return t.clone() if t.place.is_cpu_place() else t.cpu()


def _named(exc: Exception, targets: list[Target], transform: ComposedTransform) -> str:
    """The tensor an exception from Paddle is about: the first target or logical key
    its message names, else the logical tensor the transform was last asked about."""
    text = str(exc)
    for key in [t.key for t in targets] + sorted(transform.entries, key=len, reverse=True):
        if re.search(rf"(?<![\w.]){re.escape(key)}(?![\w.])", text):
            what = "target" if any(t.key == key for t in targets) else "logical tensor"
            return f"{what} {key!r}"
    if transform.current is not None:
        return f"logical tensor {transform.current!r}"
    return "targets " + ", ".join(repr(t.key) for t in targets)
