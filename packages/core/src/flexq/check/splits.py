"""Layout: which quantized weights split on block boundaries N ways (``--tp`` / ``--ep``).

For :func:`flexq.verify`. The rule is the formats' own read plans, not a table of block
sizes: the logical tensor is cut into N equal boxes along the split dimension, each
format plans each rank's box, and the split is aligned when every plan is local and no
two ranks read overlapping but different boxes of one component (each rank reads only
its own FP8 128x128 blocks and their scales, MXFP4 32-groups, int groups), except
components every rank reads whole, which are replicated (a per-channel scale under a
row split, a global scale). Column: dim 0 of a ``[out, in]`` weight (the last dim
of gpt-oss ``[E, in, out]`` experts); row: the in dim; expert: dim 0 of ``[E, ...]``.
"""

from __future__ import annotations

from itertools import combinations
from typing import TYPE_CHECKING

from flexq.check.report import SplitRow
from flexq.errors import FlexqError
from flexq.plan import TargetSlice

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flexq.check.report import SplitKind
    from flexq.composition import Composition
    from flexq.plan import Box, ReadPlan


def _dims(ndim: int, tp: int | None, ep: int | None) -> list[tuple[SplitKind, int, int]]:
    """(split name, dimension, ways) to try for a tensor of ``ndim`` dims."""
    out: list[tuple[SplitKind, int, int]] = []
    if tp and ndim == 2:
        out += [("column", 0, tp), ("row", 1, tp)]
    if tp and ndim == 3:
        out += [("column", 2, tp), ("row", 1, tp)]
    if ep and ndim == 3:
        out.append(("expert", 0, ep))
    return out


def _overlap(a: Box, b: Box) -> bool:
    return all(
        oa < ob + sb and ob < oa + sa for oa, sa, ob, sb in zip(a[0], a[1], b[0], b[1], strict=True)
    )


def check_splits(
    ct: Composition,
    tp: int | None,
    ep: int | None,
    rules: Mapping[str, SplitKind] | None = None,
) -> list[SplitRow]:
    """How every quantized logical tensor splits ``tp`` / ``ep`` ways: both tensor-parallel
    ways, or with a model's ``rules`` (:mod:`flexq.check.model`) only the one its class
    uses (a weight the rules do not name is not split by tensor parallelism)."""
    rows: list[SplitRow] = []
    for key, entry in sorted(ct.entries.items()):
        if entry.is_passthrough:
            continue
        for split, dim, ways in _dims(len(entry.shape), tp, ep):
            if rules is not None and split != "expert" and rules.get(key) != split:
                continue
            why = _why_not(ct, key, entry.shape, dim, ways)
            rows.append(
                SplitRow(
                    tensor=key,
                    format=entry.owner,
                    split=split,
                    ways=ways,
                    aligned=why == "",
                    why=why,
                )
            )
    return rows


def _why_not(ct: Composition, key: str, shape: tuple[int, ...], dim: int, ways: int) -> str:
    """'' when the ``ways``-way split of ``key`` along ``dim`` is aligned, else where it cuts."""
    if shape[dim] % ways:
        return f"dim {dim} ({shape[dim]}) does not divide by {ways}"
    step = shape[dim] // ways
    plans: list[ReadPlan] = []
    for r in range(ways):
        offset = tuple(r * step if d == dim else 0 for d in range(len(shape)))
        local = tuple(step if d == dim else n for d, n in enumerate(shape))
        try:
            plan = ct.plan(key, TargetSlice(shape, local, offset, "float32"))
        except FlexqError as exc:
            return f"rank {r}: {exc}"
        if plan.mode != "local":
            return "the format reads the whole tensor for every rank (a global plan)"
        plans.append(plan)
    for (ra, a), (rb, b) in combinations(enumerate(plans), 2):
        for source, box in a.source_slices.items():
            other = b.source_slices.get(source)
            if other is None:
                continue
            # A component every rank reads whole is replicated (a per-channel scale
            # under a row split, a global scale); any other overlap is a block, group
            # or packed word that two ranks share.
            whole = ct.checkpoint.info(source).shape
            replicated = box[1] == other[1] == whole
            if not replicated and _overlap(box, other):
                return (
                    f"ranks {ra} and {rb} both read {source!r} near offset "
                    f"{list(other[0])}: a block, group or packed word spans the cut "
                    f"at {rb * step} of dim {dim} (or the format reorders it, e.g. act-order)"
                )
    return ""
