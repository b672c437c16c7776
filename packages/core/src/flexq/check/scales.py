"""Scale values: NaN, inf, zero, negative and subnormal scales, counted per scale tensor.

Each count that is not zero is a problem, except zero and negative values of a signed
table that a format declares with its scales (a code book, :func:`suspicious`).

For :func:`flexq.verify`. Which sources are scales, and how they decode, is what each
format's read plan declares (``ReadPlan.scales``, decoded with
:func:`flexq.formatkit.scale_to_float32`), and the format's own check of them
(``ReadPlan.check``) runs through :meth:`Composition.check_plan` as before a
load. Only the scale and check components are read, never the weights.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from flexq.check.report import Problem, ScaleCounts
from flexq.errors import FlexqError, ScaleWarning
from flexq.numerics.ops import ops_for
from flexq.numerics.scales import scale_to_float32
from flexq.plan import TargetSlice

if TYPE_CHECKING:
    from flexq.composition import Composition

CORRUPT = (
    "the file is corrupt or its producer wrote bad scales: download it again; if it is "
    "as published, report it to the producer (a load decodes these blocks as stored)"
)


def count(values: np.ndarray) -> dict[str, int]:
    """How many of the decoded float32 scales ``values`` are NaN, inf, zero, negative or
    subnormal (nonzero below float32's smallest normal)."""
    arr = np.asarray(values, dtype=np.float32)
    mag = np.abs(arr)
    return {
        "nan": int(np.isnan(arr).sum()),
        "inf": int(np.isinf(arr).sum()),
        "zero": int((arr == 0).sum()),
        "negative": int((arr < 0).sum()),
        "subnormal": int(((mag > 0) & (mag < np.finfo(np.float32).tiny)).sum()),
    }


#: A declared scale tensor of at least this many values, at least a quarter of them
#: negative, is a signed table (bitsandbytes' nested code book: 127 of 256 negative,
#: one zero), not a tensor of positive scales.
TABLE_VALUES = 16


def suspicious(counts: dict[str, int], values: int) -> dict[str, int]:
    """The counts that are problems: NaN and inf always; zero, negative and subnormal
    values unless the tensor is a signed table (:data:`TABLE_VALUES`), where they are
    what it holds."""
    table = values >= TABLE_VALUES and 4 * counts["negative"] >= values
    kinds = ("nan", "inf") if table else tuple(counts)
    return {k: counts[k] for k in kinds if counts[k]}


def check_scales(ct: Composition) -> tuple[list[ScaleCounts], list[Problem]]:
    """Every declared scale of every quantized logical tensor, counted; and the problems:
    each scale tensor with a bad value, and each failure of a format's own check."""
    rows: list[ScaleCounts] = []
    problems: list[Problem] = []
    ckpt = ct.checkpoint
    for key, entry in sorted(ct.entries.items()):
        if entry.is_passthrough:
            continue
        try:
            plan = ct.plan(key, TargetSlice.whole(entry.shape, "float32"))
            sources = {s: ckpt.read(s, *plan.source_slices[s]) for s in plan.checked}
            for s in plan.scales:
                info = ckpt.info(s)
                decoded = scale_to_float32(ops_for(sources[s]), sources[s], info.dtype)
                counts = count(np.asarray(decoded))
                rows.append(
                    ScaleCounts(
                        tensor=s,
                        logical=key,
                        format=entry.owner,
                        values=int(np.size(decoded)),
                        **counts,
                    )
                )
                bad = suspicious(counts, int(np.size(decoded)))
                if bad:
                    said = ", ".join(f"{v} {k}" for k, v in bad.items())
                    problems.append(
                        Problem(
                            kind="scale",
                            message=f"{info.file}: scale tensor {s!r} of {key!r} (format "
                            f"{entry.owner!r}) holds {said} of {np.size(decoded)} scales",
                            fix=CORRUPT,
                            file=info.file,
                        )
                    )
            with warnings.catch_warnings():
                # Non-finite scales are counted above; the format's own check is what is new.
                warnings.simplefilter("ignore", ScaleWarning)
                ct.check_plan(key, plan, sources)
        except FlexqError as exc:
            problems.append(Problem(kind="scale", message=str(exc), fix=CORRUPT))
    return rows, problems
