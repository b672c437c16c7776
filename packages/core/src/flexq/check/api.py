"""``flexq.verify(path, ...)``: whether a checkpoint is whole and loadable, before a load.

For users about to start a long load and for ``flexq verify``. The default reads
headers, configs and the small scale components only, never the weights, and
reports every problem it finds (a missing shard does not stop the checks of the
others). Options add layout (``tp`` / ``ep``), whole-file hashes (``sha256``) and
decoded samples (``deep``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from flexq.check.deep import check_deep
from flexq.check.files import Survey, survey
from flexq.check.hashes import check_blobs, check_manifest, write_manifest
from flexq.check.model import model_class, split_rules
from flexq.check.report import DeepRow, FormatSummary, Memory, Problem, VerifyReport
from flexq.check.scales import check_scales
from flexq.check.splits import check_splits
from flexq.compose import composition_of
from flexq.errors import FlexqError
from flexq.io.checkpoint import Checkpoint
from flexq.io.hub import locate
from flexq.plugin.manager import registry

if TYPE_CHECKING:
    import os
    from collections.abc import Callable

    from flexq.check.deep import DeepMode
    from flexq.composition import Composition


def verify(
    path: str | os.PathLike[str],
    *,
    tp: int | None = None,
    ep: int | None = None,
    model: str | None = None,
    formats: list[str] | None = None,
    sha256: bool = False,
    manifest: str | os.PathLike[str] | None = None,
    write_manifest_to: str | os.PathLike[str] | None = None,
    deep: bool | Literal["sample", "all"] = False,
    against: str | os.PathLike[str] | None = None,
    tolerance: float | None = None,
    allow_unclaimed: bool = False,
    keep_quantized: bool = False,
    progress: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Check the checkpoint at ``path`` (directory, cache snapshot or repo id).

    :param tp: report how quantized weights split ``tp`` ways (column and row).
    :param ep: report how expert tensors ``[E, ...]`` split ``ep`` ways.
    :param model: a PaddleFormers model class name (``LlamaForCausalLM``): ``tp`` splits
        each weight only as that class splits it (needs paddleformers; see
        :mod:`flexq.check.model`).
    :param sha256: re-hash every LFS blob of a cache snapshot against its name.
    :param manifest: check every file against this manifest (plain directories).
    :param write_manifest_to: record the files' sha256 in this file (outside the checkpoint).
    :param deep: decode a sample of blocks of every quantized tensor to float32 (True
        or ``"sample"``: its first, middle and last bands), or all of it (``"all"``).
    :param against: a dequantized twin (directory, snapshot or repo id; what ``flexq
        convert`` writes): the decoded boxes are compared with its tensors (implies
        ``deep="sample"`` unless ``deep="all"``).
    :param tolerance: compare with the twin within this absolute difference (default:
        bit for bit, in the twin's dtype).
    :param keep_quantized: the load will keep weights quantized, so a ``tp`` / ``ep``
        split that cuts a block is a problem (it is information otherwise).
    :param progress: called with each hashed chunk's byte count.
    :raises FlexqError: when ``path`` is no checkpoint at all, or ``formats`` names an
        unknown format (the CLI's exit 2); everything else is a problem in the report.
    """
    asked = registry.active(formats)  # an unknown format is a usage error
    if deep not in (True, False, "sample", "all"):
        raise FlexqError(f"deep={deep!r}: give True (or 'sample') for a sample, or 'all'")
    mode: DeepMode | None = "all" if deep == "all" else "sample" if deep or against else None
    if model is not None and not tp:
        raise FlexqError(f"--model {model}: give the tensor-parallel degree too (--tp N)")
    if model is not None:
        model_class(model)  # a usage error before any hashing
    if tolerance is not None and (against is None or not tolerance >= 0):
        raise FlexqError(
            f"tolerance {tolerance!r}: give a tolerance of 0 or more, with a twin to "
            f"compare with (--against DIR)"
        )
    # A container format's file (GGUF): its header checks are its opening; no shards.
    container = registry.open_container(path)
    files = locate(path) if container is None else None
    found = survey(files) if files is not None else Survey()
    problems = list(found.problems)
    hashed = 0
    if files is not None and sha256:
        n, bad = check_blobs(files, progress)
        hashed += n
        problems += bad
    if files is not None and manifest is not None:
        n, bad = check_manifest(files, Path(manifest), progress)
        hashed += n
        problems += bad
    if files is not None and write_manifest_to is not None:
        hashed += write_manifest(files, Path(write_manifest_to), progress)
    with container or Checkpoint(files.path if files else path, skip=found.skip) as ckpt:
        try:
            ct = composition_of(ckpt, formats, strict=False, allow_unclaimed=allow_unclaimed)
        except FlexqError as exc:
            problems.append(Problem(kind="coverage", message=str(exc), fix=_fix(str(exc))))
            return VerifyReport(
                path=str(ckpt.path), formats=list(asked), shards=found.shards, summary=[],
                memory=Memory(bfloat16=0, float32=0, keep_quantized=0), scales=[], splits=[],
                deep_mode=None, deep=[], against=None, tolerance=None, hashed_bytes=hashed,
                bytes_read=ckpt.bytes_read, problems=problems,
            )  # fmt: skip
        problems += [Problem(kind="coverage", message=p, fix=_fix(p)) for p in ct.problems]
        scales, bad_scales = check_scales(ct)
        problems += bad_scales
        rules = split_rules(model, ckpt) if model is not None else None
        splits = check_splits(ct, tp, ep, rules) if tp or ep else []
        if keep_quantized:
            problems += [
                Problem(
                    kind="layout",
                    message=f"{s.tensor!r} (format {s.format!r}): a {s.ways}-way {s.split} "
                    f"split does not fall on block boundaries: {s.why}",
                    fix="load it dequantized (not keep-quantized), or choose a degree that "
                    "divides the tensor into whole blocks",
                )
                for s in splits
                if not s.aligned
            ]
        samples, bad_samples = _deep(ct, mode, against, tolerance)
        problems += bad_samples
        return VerifyReport(
            path=str(ckpt.path),
            formats=ct.formats,
            shards=found.shards,
            summary=_summary(ct),
            memory=_memory(ct),
            scales=scales,
            splits=splits,
            deep_mode=mode,
            deep=samples,
            against=None if against is None else str(against),
            tolerance=tolerance,
            hashed_bytes=hashed,
            bytes_read=ckpt.bytes_read,
            problems=problems,
        )


def _fix(problem: str) -> str:
    """What to do about one of compose's problems."""
    if "install " in problem or "allow_unclaimed" in problem:
        return "install the format package the message names (or load with --allow-unclaimed)"
    return (
        "the config and the tensors disagree or a component is missing: download the "
        "checkpoint again; if it is as published, report it to its producer"
    )


def _stored(ct: Composition, key: str) -> int:
    return sum(ct.checkpoint.info(s).nbytes for s in ct.entries[key].sources)


def _summary(ct: Composition) -> list[FormatSummary]:
    rows: dict[str, tuple[int, int]] = {}
    for key, entry in ct.entries.items():
        n, b = rows.get(entry.owner, (0, 0))
        rows[entry.owner] = (n + 1, b + _stored(ct, key))
    return [
        FormatSummary(format=f, tensors=n, stored_bytes=b) for f, (n, b) in sorted(rows.items())
    ]


def _memory(ct: Composition) -> Memory:
    elements = sum(math.prod(e.shape) for e in ct.entries.values())
    return Memory(
        bfloat16=2 * elements,
        float32=4 * elements,
        keep_quantized=sum(_stored(ct, k) for k in ct.entries),
    )


def _deep(
    ct: Composition,
    mode: DeepMode | None,
    against: str | os.PathLike[str] | None,
    tolerance: float | None,
) -> tuple[list[DeepRow], list[Problem]]:
    """--deep's rows and problems, with the twin opened (read-only) for the comparison."""
    if mode is None:
        return [], []
    if against is None:
        return check_deep(ct, mode)
    with Checkpoint(against) as twin:
        return check_deep(ct, mode, twin, tolerance)
