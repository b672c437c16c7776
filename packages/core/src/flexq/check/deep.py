"""``--deep``: decode quantized tensors (a sample of blocks, or all) and check the values.

For :func:`flexq.verify`. Every quantized logical tensor is decoded through its format's
plan, checks and decode, as a load does, into float32: by default a sample of row bands
(the first, middle and last :data:`DEEP_ROWS` rows; the first, middle and last expert
of ``[E, ...]``), with ``"all"`` the whole tensor in bands of at most
:data:`BAND_BYTES` of float32 (memory stays bounded). Non-finite outputs and the value
range are reported per tensor. With a dequantized twin (what ``flexq convert`` writes)
the same boxes are decoded to the twin's dtype and compared with it, bit for bit, or
within an absolute ``tolerance`` that the report states.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from flexq.check.report import DeepRow, Problem
from flexq.check.scales import CORRUPT
from flexq.errors import FlexqError
from flexq.io.dtypes import FLOAT_DTYPES
from flexq.io.dtypes import dtype as storage_dtype
from flexq.load.pieces import rows_per_cut
from flexq.numerics.rounding import bfloat16_bits_to_float32
from flexq.testing import decode_box

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.io.checkpoint import Checkpoint

#: Rows of each sampled band of a 2-D tensor.
DEEP_ROWS = 128
#: Float32 bytes of one band that ``"all"`` decodes at a time.
BAND_BYTES = 64 << 20

DeepMode = Literal["sample", "all"]
Box = tuple[tuple[int, ...], tuple[int, ...]]

TWIN_FIX = (
    "if the twin was written from this checkpoint (flexq convert), the checkpoint or the "
    "twin changed since: check both with --sha256 / --manifest; otherwise the twin is "
    "another model's"
)


def boxes(shape: tuple[int, ...], mode: DeepMode) -> list[Box]:
    """The boxes of a tensor of ``shape`` that ``mode`` decodes: row bands along dim 0."""
    if mode == "all":
        rows = rows_per_cut(shape, BAND_BYTES)
        starts = list(range(0, shape[0], rows))
    else:
        rows = 1 if len(shape) == 3 else min(shape[0], DEEP_ROWS)
        last = shape[0] - rows
        starts = sorted({0, last // 2, last})
    return [((s, *(0,) * (len(shape) - 1)), (min(rows, shape[0] - s), *shape[1:])) for s in starts]


@dataclass
class _Tally:
    """What the decoded boxes of one tensor held."""

    values: int = 0
    nonfinite: int = 0
    low: float | None = None
    high: float | None = None
    compared: int = 0
    differ: int = 0
    max_diff: float = 0.0
    first: str = ""
    seen: list[list[list[int]]] = field(default_factory=list)

    def add(self, values: np.ndarray) -> None:
        finite = values[np.isfinite(values)]
        self.values += int(values.size)
        self.nonfinite += int(values.size - finite.size)
        if finite.size:
            lo, hi = float(finite.min()), float(finite.max())
            self.low = lo if self.low is None else min(self.low, lo)
            self.high = hi if self.high is None else max(self.high, hi)


def _widen(values: np.ndarray, name: str) -> np.ndarray:
    """Values in storage form (BF16 as bits) as float32, exactly."""
    if name == "BF16":
        return bfloat16_bits_to_float32(values)
    return np.asarray(values, dtype=np.float32)


def _compare(
    tally: _Tally, ours: np.ndarray, theirs: np.ndarray, name: str, box: Box, tol: float | None
) -> None:
    """Count where ``ours`` and the twin's ``theirs`` (both storage form of ``name``)
    differ: in bits, or by more than ``tol`` in float32."""
    a, b = _widen(ours, name), _widen(theirs, name)
    if tol is None:
        bits = np.dtype(f"u{ours.dtype.itemsize}")
        bad = ours.view(bits) != theirs.view(bits)
    else:
        bad = ~np.isclose(a, b, rtol=0.0, atol=tol, equal_nan=True)
    both = np.isfinite(a) & np.isfinite(b)
    diff = np.abs(a[both] - b[both])
    tally.compared += int(bad.size)
    if diff.size:
        tally.max_diff = max(tally.max_diff, float(diff.max()))
    n = int(bad.sum())
    if n and not tally.differ:
        where = np.unravel_index(int(np.argmax(bad)), bad.shape)
        at = [int(o) + int(i) for o, i in zip(box[0], where, strict=True)]
        tally.first = f"first at {at}: {float(a[where])!r} here, {float(b[where])!r} in the twin"
    tally.differ += n


def check_deep(
    ct: Composition,
    mode: DeepMode,
    twin: Checkpoint | None = None,
    tolerance: float | None = None,
) -> tuple[list[DeepRow], list[Problem]]:
    """Decode ``mode``'s boxes of every quantized tensor of ``ct``; with ``twin``, compare
    them with its tensors of the same names."""
    rows: list[DeepRow] = []
    problems: list[Problem] = []
    for key, entry in sorted(ct.entries.items()):
        if entry.is_passthrough or not entry.shape:
            continue
        said = f"{key!r} (format {entry.owner!r})"
        name = _twin_dtype(twin, key, entry.shape, said, problems)
        tally = _Tally()
        try:
            for box in boxes(entry.shape, mode):
                tally.seen.append([list(box[0]), list(box[1])])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # non-finite scales are counted already
                    values = np.asarray(decode_box(ct, key, *box, "float32"))
                    tally.add(values)
                    if twin is not None and name is not None:
                        out = storage_dtype(name).paddle
                        assert out is not None  # _twin_dtype admits load dtypes only
                        ours = values if out == "float32" else decode_box(ct, key, *box, out)
                        theirs = twin.read(key, *box)
                        _compare(tally, np.asarray(ours), theirs, name, box, tolerance)
        except FlexqError as exc:
            problems.append(Problem(kind="deep", message=str(exc), fix=CORRUPT))
            continue
        rows.append(
            DeepRow(
                tensor=key, format=entry.owner, boxes=tally.seen, values=tally.values,
                nonfinite=tally.nonfinite, min=tally.low, max=tally.high,
                compared=tally.compared, differ=tally.differ,
                max_abs_diff=tally.max_diff if tally.compared else None,
            )
        )  # fmt: skip
        if tally.nonfinite:
            problems.append(
                Problem(
                    kind="deep",
                    message=f"{said}: {tally.nonfinite} of {tally.values} decoded values in "
                    f"{tally.seen} are not finite",
                    fix=CORRUPT,
                )
            )
        if tally.differ:
            how = "bit for bit" if tolerance is None else f"within {tolerance:g}"
            problems.append(
                Problem(
                    kind="against",
                    message=f"{said}: {tally.differ} of {tally.compared} decoded values differ "
                    f"from the twin {twin.path if twin else ''}'s {how} ({tally.first}; "
                    f"largest difference {tally.max_diff:g})",
                    fix=TWIN_FIX,
                )
            )
    return rows, problems


def _twin_dtype(
    twin: Checkpoint | None,
    key: str,
    shape: tuple[int, ...],
    said: str,
    problems: list[Problem],
) -> str | None:
    """The twin's float dtype for ``key``, or None (and a problem) when it cannot be compared."""
    if twin is None:
        return None
    info = twin.tensors.get(key)
    if info is None:
        why = "has no tensor of that name"
    elif info.shape != shape:
        why = f"holds it as {list(info.shape)}, not {list(shape)}"
    elif storage_dtype(info.dtype).paddle not in FLOAT_DTYPES:
        why = f"holds it as {info.dtype}, not a dtype a load writes ({', '.join(FLOAT_DTYPES)})"
    else:
        return info.dtype
    problems.append(
        Problem(
            kind="against",
            message=f"{said}: the twin {twin.path} {why}",
            fix="compare with a dequantized copy of this checkpoint (flexq convert SRC DST)",
        )
    )
    return None
