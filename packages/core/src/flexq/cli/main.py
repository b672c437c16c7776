"""The ``flexq`` command: list-formats, inspect, convert, demo.

Errors on bad input print one line on stderr and exit with code 2; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from dataclasses import asdict
from typing import TYPE_CHECKING, TextIO

from rich.markup import escape
from rich.table import Table

from flexq.cli.console import console
from flexq.cli.convert import FLOATS, convert, parse_size
from flexq.compose import ComposedTransform, compose
from flexq.errors import FlexqError
from flexq.plugin.manager import list_formats

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

EXIT_BAD_INPUT = 2


def _list_formats(args: argparse.Namespace) -> int:
    rows = list_formats()
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    table = Table("name", "version", "distribution", "source", "description")
    for r in rows:
        cells = (r.name, r.version, r.distribution, r.source, r.error or r.description)
        table.add_row(*map(escape, cells))
    console().print(table)
    return 0


def inspect_report(ct: ComposedTransform) -> dict[str, object]:
    """What ``flexq inspect --json`` prints for a composed checkpoint."""
    ckpt = ct.checkpoint
    tensors = []
    for key, e in sorted(ct.entries.items()):
        comps = [
            {
                "key": s,
                "dtype": ckpt.info(s).dtype,
                "shape": list(ckpt.info(s).shape),
                "file": ckpt.info(s).file,
            }
            for s in e.sources
        ]
        tensors.append(
            {
                "key": key,
                "format": e.owner,
                "shape": list(e.shape),
                "dtype": e.dtype,
                "components": comps,
            }
        )
    return {
        "path": str(ckpt.path),
        "formats": ct.formats,
        "tensors": tensors,
        "problems": ct.problems,
        "total_bytes": sum(t.nbytes for t in ckpt.tensors.values()),
    }


def _inspect(args: argparse.Namespace) -> int:
    ct = compose(args.path, args.formats, strict=False)
    report = inspect_report(ct)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        table = Table("logical tensor", "format", "shape", "dtype", "components")
        for t in ct.entries.values():
            comps = "\n".join(f"{s} {ct.checkpoint.info(s).dtype}" for s in t.sources)
            cells = (t.key, t.owner, str(list(t.shape)), t.dtype, comps)
            table.add_row(*map(escape, cells))
        out = console()
        out.print(table)
        out.print(f"total bytes: {report['total_bytes']:,}")
        for p in ct.problems:
            out.print(f"problem: {p}", style="red", markup=False)
    if ct.problems:
        print(f"flexq: {len(ct.problems)} problem(s) in {args.path}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def _convert(args: argparse.Namespace) -> int:
    progress = None
    if sys.stderr.isatty():
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            MofNCompleteColumn,
            Progress,
            TransferSpeedColumn,
        )

        ct_total = len(compose(args.src, args.formats).entries)
        bar = Progress(
            "{task.description}", BarColumn(), MofNCompleteColumn(), DownloadColumn(),
            TransferSpeedColumn(), transient=True,
        )  # fmt: skip
        task = bar.add_task("converting", total=ct_total)
        bar.start()

        def progress(key: str, nbytes: int) -> None:
            bar.update(task, advance=1, description=key[-40:])

    try:
        report = convert(
            args.src,
            args.dst,
            dtype=args.dtype,
            formats=args.formats,
            max_shard_bytes=parse_size(args.max_shard_size),
            force=args.force,
            progress=progress,
        )
    finally:
        if progress is not None:
            bar.stop()
    shards = f"{report.shards} shard(s)"
    print(f"wrote {report.tensors} tensors ({report.bytes:,} bytes) in {shards} to {args.dst}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from flexq.cli.demo import print_table, run

    if not args.debug:
        # Paddle's loader logs every file it opens at INFO (its handler is set on import).
        from paddle.distributed.fleet.utils.log_util import logger

        logger.setLevel(logging.WARNING)
    rows = run()
    print_table(rows)
    if not rows:
        print("flexq: no installed format can encode; install a format package", file=sys.stderr)
        return 1
    drifted = [r.format for r in rows if not r.ok]
    if drifted:
        print(f"flexq: logits drifted beyond tolerance for {', '.join(drifted)}", file=sys.stderr)
        return 1
    return 0


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """flexq's warnings as one ``flexq: warning: ...`` line on stderr (no source line).

    Other libraries' warnings (Paddle warns about ccache on import) are noise on
    the command line; ``--debug`` shows them.
    """
    if issubclass(category, FlexqError):
        print(f"flexq: warning: {message}", file=sys.stderr)


def _formats_arg(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flexq", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list-formats", help="list installed quantization formats")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_list_formats)
    p = sub.add_parser("inspect", help="show the logical tensors of a checkpoint")
    p.add_argument("path")
    p.add_argument("--json", action="store_true")
    p.add_argument("--formats", type=_formats_arg, default=None, help="comma-separated names")
    p.set_defaults(func=_inspect)
    p = sub.add_parser("convert", help="dequantize a checkpoint into plain safetensors")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--dtype", choices=sorted(FLOATS), default="bfloat16")
    p.add_argument("--formats", type=_formats_arg, default=None, help="comma-separated names")
    p.add_argument("--max-shard-size", default="5GB")
    p.add_argument("--force", action="store_true", help="replace an existing DST")
    p.set_defaults(func=_convert)
    p = sub.add_parser("demo", help="quantize a tiny model in every format and load it back")
    p.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flexq`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    if not args.debug:
        logging.getLogger("flexq").setLevel(logging.WARNING)
        warnings.showwarning = _one_line_warning
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (FlexqError, OSError) as exc:
        if args.debug:
            raise
        print(f"flexq: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        if args.debug:
            raise
        print(
            f"flexq: internal error: {type(exc).__name__}: {exc} (rerun with --debug)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
