"""``flexq verify PATH``: the command over :func:`flexq.verify`, and its one-screen summary.

For users about to load a large download. Exit 0: clean; 1: problems (each listed
with its fix); 2: usage or unreadable input (one ``flexq: error:`` line, as every
command).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from flexq.check.api import verify
from flexq.cli.console import console

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from flexq.check.report import VerifyReport

EXIT_PROBLEMS = 1


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``flexq verify`` (besides --formats / --allow-unclaimed)."""
    p.add_argument("path", metavar="PATH", help="checkpoint directory, cache snapshot or repo id")
    p.add_argument(
        "--tp",
        type=_positive,
        default=None,
        metavar="N",
        help="show which quantized weights split on block boundaries N ways",
    )
    p.add_argument(
        "--ep",
        type=_positive,
        default=None,
        metavar="N",
        help="show which expert tensors [E, ...] split N ways",
    )
    p.add_argument(
        "--model",
        default=None,
        metavar="CLASS",
        help="with --tp: split each weight as PaddleFormers' CLASS does (e.g. "
        "LlamaForCausalLM; needs paddleformers)",
    )
    p.add_argument(
        "--keep-quantized",
        action="store_true",
        help="the load keeps weights quantized: a --tp/--ep split that cuts a block is a problem",
    )
    p.add_argument(
        "--sha256",
        action="store_true",
        help="re-hash every blob of a Hugging Face cache snapshot against its name",
    )
    p.add_argument(
        "--manifest",
        type=Path,
        default=None,
        metavar="FILE",
        help="check every file against the sha256 manifest FILE",
    )
    p.add_argument(
        "--write-manifest",
        type=Path,
        default=None,
        metavar="FILE",
        help="record every file's sha256 in FILE (outside the checkpoint)",
    )
    p.add_argument(
        "--deep",
        nargs="?",
        const="sample",
        default=None,
        choices=("sample", "all"),
        help="decode a sample of blocks of every quantized tensor (--deep=all: all of it) "
        "and report non-finite values and value ranges",
    )
    p.add_argument(
        "--against",
        default=None,
        metavar="DIR",
        help="compare the decoded values with a dequantized twin (flexq convert's output), "
        "bit for bit; implies --deep",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=None,
        metavar="X",
        help="with --against: allow an absolute difference of X",
    )
    p.add_argument("--json", action="store_true", help="print JSON (docs/schema/verify.json)")


@contextmanager
def _hash_progress() -> Iterator[Callable[[int], None]]:
    """Bytes hashed, as a rich counter on stderr when stderr is a terminal."""
    from rich.console import Console
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    progress = Progress(
        "hashed", DownloadColumn(), TransferSpeedColumn(),
        console=Console(stderr=True), disable=not sys.stderr.isatty(),
    )  # fmt: skip
    task = progress.add_task("sha256", total=None)
    with progress:
        yield lambda n: progress.advance(task, n)


def _verify(args: argparse.Namespace) -> int:
    """check that a checkpoint is whole and loadable, before a long load

    Reads headers, config.json and the small scale tensors only: shards missing,
    truncated or stray, tensors stored twice, coverage (what compose reports), NaN,
    inf, zero, negative and subnormal scales; then a summary of formats, bytes and
    the memory a load needs. --tp/--ep, --sha256/--manifest and --deep add checks.
    Exit 0: clean; 1: problems (each listed with its fix); 2: unreadable input.
    """
    hashing = args.sha256 or args.manifest is not None or args.write_manifest is not None
    with _hash_progress() as progress:
        report = verify(
            args.path, tp=args.tp, ep=args.ep, model=args.model, formats=args.formats,
            sha256=args.sha256,
            manifest=args.manifest, write_manifest_to=args.write_manifest,
            deep=args.deep or False, against=args.against, tolerance=args.tolerance,
            allow_unclaimed=args.allow_unclaimed,
            keep_quantized=args.keep_quantized, progress=progress if hashing else None,
        )  # fmt: skip
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        _show(report)
    if report.problems:
        print(f"flexq: {len(report.problems)} problem(s) in {args.path}", file=sys.stderr)
        return EXIT_PROBLEMS
    return 0


def _show(report: VerifyReport) -> None:
    """The one-screen summary."""
    out = console()
    table = Table("format", "tensors", "stored bytes", title=escape(report.path))
    for row in report.summary:
        table.add_row(escape(row.format), str(row.tensors), f"{row.stored_bytes:,}")
    out.print(table)
    bad = [s for s in report.shards if not s.ok]
    out.print(f"shards: {len(report.shards) - len(bad)} of {len(report.shards)} whole")
    m = report.memory
    out.print(
        f"memory of a load: bfloat16 {m.bfloat16:,} B, float32 {m.float32:,} B, "
        f"keep-quantized {m.keep_quantized:,} B"
    )
    out.print(
        f"scale tensors checked: {len(report.scales)}; tensor bytes read: {report.bytes_read:,}"
    )
    if report.hashed_bytes:
        out.print(f"sha256: {report.hashed_bytes:,} bytes hashed")
    if report.splits:
        aligned = sum(s.aligned for s in report.splits)
        out.print(f"splits: {aligned} of {len(report.splits)} on block boundaries")
        for s in report.splits:
            if not s.aligned:
                out.print(f"  {s.tensor} {s.split} x{s.ways}: {s.why}", markup=False)
    if report.against is not None:
        how = "bit for bit" if report.tolerance is None else f"within {report.tolerance:g}"
        out.print(f"compared with {report.against} {how}", markup=False)
    if report.deep:
        # One line for all tensors (one screen); those with bad values are problems below.
        rows = report.deep
        low = min((d.min for d in rows if d.min is not None), default=None)
        high = max((d.max for d in rows if d.max is not None), default=None)
        twin = sum(d.compared for d in rows)
        compared = f", {sum(d.differ for d in rows)} of {twin} differ from the twin" if twin else ""
        out.print(
            f"deep ({report.deep_mode}): {len(rows)} tensors, {sum(d.values for d in rows):,} "
            f"values, {sum(d.nonfinite for d in rows)} non-finite, range [{low}, {high}]"
            f"{compared}",
            markup=False,
        )
    for p in report.problems:
        out.print(f"problem ({p.kind}): {p.message}", style="red", markup=False)
        out.print(f"  fix: {p.fix}", markup=False)
    if not report.problems:
        out.print("no problems found", style="green")
