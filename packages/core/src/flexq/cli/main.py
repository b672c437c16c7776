"""The ``flexq`` command: list-formats, inspect, convert, demo.

Each mistake prints one ``flexq: error: ...`` line on stderr and exits with
code 2; ``--debug`` (accepted before or after the subcommand) adds the
traceback and Paddle's own logs (the exit code stays 2). SIGINT and SIGTERM print one line and
exit with 130 and 143.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from flexq import __version__
from flexq.cli.console import console
from flexq.cli.convert import FLOATS, convert, parse_size
from flexq.cli.documents import (
    format_list,
    inspect_document,
    unclaimed,
    unclaimed_methods,
)
from flexq.cli.progress import convert_progress
from flexq.cli.tables import formats_summary, formats_table, inspect_summary, inspect_table
from flexq.cli.verify import _verify as verify_command
from flexq.cli.verify import add_arguments as verify_arguments
from flexq.compose import composition_of
from flexq.errors import FlexqError, PluginError, PluginWarning
from flexq.interrupts import uninterrupted
from flexq.load.quiet import quiet_paddle
from flexq.plugin.manager import list_formats, registry

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import FrameType

    from flexq.composition import Composition

EXIT_BAD_INPUT = 2
#: The shell's exit codes for a process ended by a signal: 128 + the signal number.
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
PADDLE_INSTALL = (
    "pip install paddlepaddle (CPU), or paddlepaddle-gpu from Paddle's own index "
    "(see docs/user-guide.md#install)"
)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (a BaseException, so every cleanup path runs)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _settle() -> None:
    """The command's outcome is decided (or being cleaned up after): later signals are
    ignored, so the one line that says how it ended is the only one."""
    for sig in EXIT_SIGNAL:
        signal.signal(sig, signal.SIG_IGN)


def _on_signal(signum: int, frame: FrameType | None) -> NoReturn:
    _settle()
    raise Interrupted(signum)


def warn(message: str) -> None:
    """One ``flexq: warning: ...`` line on stderr."""
    print(f"flexq: warning: {message}", file=sys.stderr)


def _check_registry(formats: list[str] | None = None) -> None:
    """A warning line per format that failed to load (when every installed format is in
    use: one named in ``--formats`` is an error of its own); FLEXQ_FORMATS naming none is
    an error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginWarning)
        allow_error = registry.allow_error  # discovery, with its warnings
    if allow_error is not None:
        raise PluginError(allow_error)
    broken = {info.error for info in registry.broken()}
    for w in caught:  # name clashes: about the formats in use, always shown
        if issubclass(w.category, PluginWarning) and str(w.message) not in broken:
            warn(str(w.message))
    if formats is not None:
        return
    for info in registry.broken():
        warn(f"{info.error} (the other formats work; `flexq list-formats` shows it)")


def _warn_unclaimed(ct: Composition) -> None:
    keys = unclaimed(ct)
    claimed = {m for n in ct.formats for m in registry.quant_methods(n)}
    methods = unclaimed_methods(ct, claimed)
    if methods:
        warn(
            f"--allow-unclaimed: {ct.checkpoint.path}: quantization method(s) "
            f"{', '.join(methods)}, which no format in use decodes, pass(es) through as stored"
        )
    if keys:
        names = ", ".join(repr(k) for k in keys[:3]) + (", ..." if len(keys) > 3 else "")
        warn(
            f"--allow-unclaimed: {len(keys)} tensor(s) that look quantized pass through as "
            f"stored, not as weights: {names}"
        )


def _list_formats(args: argparse.Namespace) -> int:
    """list installed quantization formats

    Installed and registered formats: version, distribution, the quant_method values
    each decodes, and why a format failed to load.
    """
    _check_registry()
    rows = list_formats()
    if args.json:
        print(format_list(rows).model_dump_json(indent=2))
        return 0
    out = console()
    out.print(formats_table(rows, out.width))
    out.print(formats_summary(rows))
    return 0


def _inspect(args: argparse.Namespace) -> int:
    """show the logical tensors of a checkpoint

    Each logical tensor with its format, shape and dtype, and the physical components
    (shape, dtype, file) it is decoded from; problems; exit 2 when there are any.
    Reads headers and config.json only.
    """
    _check_registry(args.formats)
    ct = composition_of(args.path, args.formats, strict=False, allow_unclaimed=args.allow_unclaimed)
    document = inspect_document(ct)
    if args.allow_unclaimed:
        _warn_unclaimed(ct)
    if args.json:
        print(document.model_dump_json(indent=2))
    else:
        out = console()
        out.print(inspect_table(document, out.width))
        out.print(inspect_summary(document))
        for note in ct.checkpoint.notes:
            out.print(note, markup=False)
        for p in ct.problems:
            out.print(f"problem: {p}", style="red", markup=False)
    if ct.problems:
        print(f"flexq: {len(ct.problems)} problem(s) in {args.path}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def _import_paddle() -> None:
    """Import Paddle, for the commands that need it, with SIGINT and SIGTERM held off.

    Interrupted inside its C extension, Paddle's import fails with ``ImportError:
    initialization failed`` and prints an error line of its own; held off, a signal
    ends the command as soon as the import is done (about a second at most).
    """
    with uninterrupted():
        import paddle  # noqa: F401


def _convert(args: argparse.Namespace) -> int:
    """dequantize a checkpoint into plain safetensors

    Write SRC's dequantized tensors as a plain HF-style checkpoint at DST, with its
    config (quantization section removed), tokenizer and generation config. DST is
    complete or untouched; it may not be, hold or lie inside SRC.
    """
    _check_registry(args.formats)
    _import_paddle()
    src = registry.open_checkpoint(args.src)  # composed twice (warnings first), read once
    if args.allow_unclaimed:
        _warn_unclaimed(composition_of(src, args.formats, allow_unclaimed=True))
    # DST in place: an interrupt now could only make the report lie about it (_settle).
    progress = convert_progress(on_done=_settle)
    try:
        report = convert(
            src,
            args.dst,
            dtype=args.dtype,
            formats=args.formats,
            max_shard_bytes=parse_size(args.max_shard_size),
            force=args.force,
            allow_unclaimed=args.allow_unclaimed,
            progress=progress,
        )
    finally:
        progress.stop()
    if report.skipped:
        names = ", ".join(report.skipped)
        print(f"flexq: not copied (not checkpoint companions): {names}", file=sys.stderr)
    shards = f"{report.shards} shard(s)"
    print(f"wrote {report.tensors} tensors ({report.bytes:,} bytes) in {shards} to {args.dst}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    """quantize a tiny model in every format and load it back

    Write a tiny Llama-style model in every installed format that can encode, load
    each back into Paddle and compare logits with the unquantized model (needs Paddle).
    """
    try:
        _import_paddle()  # the demo's models are Paddle models
    except ModuleNotFoundError:
        raise FlexqError(f"flexq demo needs PaddlePaddle, which is not installed: "
                         f"{PADDLE_INSTALL}") from None  # fmt: skip
    from flexq.cli import demo, demo_paddleformers

    # A real PaddleFormers Llama where PaddleFormers is installed (kept or not); the
    # demo's own tiny model otherwise.
    with_paddleformers = demo_paddleformers.available()
    if with_paddleformers:
        rows = demo_paddleformers.run(keep=args.keep)
    else:
        rows = demo.run(keep=args.keep)
    demo.print_table(rows)
    if args.keep is not None:
        print(kept_summary(args.keep, [r.format for r in rows], with_paddleformers))
    if not rows:
        print("flexq: no installed format can encode; install a format package", file=sys.stderr)
        return 1
    drifted = [r.format for r in rows if not r.ok]
    if drifted:
        print(f"flexq: logits drifted beyond tolerance for {', '.join(drifted)}", file=sys.stderr)
        return 1
    return 0


def kept_summary(keep: Path, formats: Sequence[str], with_paddleformers: bool) -> str:
    """What ``flexq demo --keep DIR`` kept, where, and what loads it."""
    base = "bf16" if with_paddleformers else "unquantized"
    model = "a PaddleFormers LlamaForCausalLM" if with_paddleformers else "the demo's tiny Llama"
    lines = [f"kept {len(formats)} quantized checkpoints of {model} in {keep}/:"]
    lines += [f"  {keep / name}/" for name in formats]
    lines.append(f"  {keep / base}/ (the unquantized model)")
    lines.append(f"try: flexq inspect {keep / formats[0]}" if formats else "")
    if with_paddleformers:
        lines.append(
            "load: flexq.paddleformers.from_pretrained(AutoModelForCausalLM, "
            f"{str(keep / (formats[0] if formats else base))!r})"
        )
    return "\n".join(line for line in lines if line)


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
        warn(str(message))


def _formats_arg(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in its help, unless there is none worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False) or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


_FORMATS_HELP = (
    "comma-separated format names to use (default: every installed format; "
    "'' uses none, so every tensor passes through)"
)
_UNCLAIMED_HELP = (
    "pass through tensors that look quantized but no installed format claims, as they "
    "are stored (packed integers, scales), with a warning; their values are NOT weights"
)


def docs_place() -> str:
    """Where this install's user can read the CLI docs: the checkout's ``docs/cli.md`` by
    its full path when flexq runs from a source checkout (editable installs, the nox
    sessions); otherwise the help itself, since a wheel carries no docs/ folder."""
    cli_md = Path(__file__).resolve().parents[5] / "docs" / "cli.md"
    if cli_md.is_file():
        return str(cli_md)
    return "each command's --help, and docs/cli.md in flexq's source"


def build_parser() -> argparse.ArgumentParser:
    """The ``flexq`` argument parser (its help is snapshot-tested)."""
    debug = "show tracebacks, other libraries' warnings and Paddle's logs"
    # Subcommands accept --debug too; SUPPRESS keeps them from resetting the main one.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug)
    parser = argparse.ArgumentParser(
        prog="flexq",
        description="Inspect, convert and try quantized safetensors checkpoints for PaddlePaddle.",
        epilog=f"Errors print one line on stderr and exit with 2. Docs: {docs_place()}",
        formatter_class=_Help,
    )
    parser.add_argument("--debug", action="store_true", help=debug)
    parser.add_argument("--version", action="version", version=f"flexq {__version__}")
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="one of these (flexq COMMAND --help shows its options):",
    )

    def command(func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        """The subcommand ``func`` runs (``_list_formats`` is ``list-formats``); the first
        line of its docstring is the summary, the rest its description."""
        summary, _, description = (func.__doc__ or "").strip().partition("\n\n")
        p = sub.add_parser(
            func.__name__.removeprefix("_").replace("_", "-"),
            help=summary,
            description=description,
            formatter_class=_Help,
            parents=[common],
        )
        p.set_defaults(func=func)
        return p

    def composing(p: argparse.ArgumentParser) -> None:
        """The options of every command that composes a checkpoint (compose's arguments)."""
        p.add_argument("--formats", type=_formats_arg, default=None, help=_FORMATS_HELP)
        p.add_argument("--allow-unclaimed", action="store_true", help=_UNCLAIMED_HELP)

    p = command(_list_formats)
    p.add_argument("--json", action="store_true", help="print JSON (docs/schema/list-formats.json)")

    p = command(_inspect)
    p.add_argument(
        "path", metavar="PATH", help="checkpoint directory, HF cache snapshot or repo id"
    )
    p.add_argument("--json", action="store_true", help="print JSON (docs/schema/inspect.json)")
    composing(p)

    p = command(_convert)
    p.add_argument(
        "src", metavar="SRC", help="quantized checkpoint: directory, HF cache snapshot or repo id"
    )
    p.add_argument("dst", metavar="DST", help="output directory (new, empty, or --force)")
    p.add_argument(
        "--dtype",
        choices=sorted(FLOATS),
        default=None,
        help="dtype of every float tensor (default: each tensor's own dtype in SRC, "
        "e.g. float16 for AWQ)",
    )
    p.add_argument("--max-shard-size", default="5GB", metavar="SIZE", help="largest output shard")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace a DST that an earlier flexq convert wrote",
    )
    composing(p)

    p = command(verify_command)
    verify_arguments(p)
    composing(p)

    p = command(_demo)
    p.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the checkpoints into DIR/<format>/ and keep them (to try inspect and convert)",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, noted: Sequence[int] = ()) -> int:
    """Entry point of the ``flexq`` command; returns the exit code.

    :param noted: signals that came before this function took over (the console
        script's :mod:`flexq_entry` notes them while the command's modules import);
        the first ends the command as an interrupt.
    """
    args = build_parser().parse_args(argv)
    # flexq's logger at DEBUG also lets Paddle's own logs through (flexq.load.quiet).
    logging.getLogger("flexq").setLevel(logging.DEBUG if args.debug else logging.WARNING)
    if not args.debug:
        warnings.showwarning = _one_line_warning
    previous = {sig: signal.getsignal(sig) for sig in EXIT_SIGNAL}
    try:
        for sig in EXIT_SIGNAL:
            signal.signal(sig, _on_signal)
        if noted:
            _on_signal(noted[0], None)
        return _run(args)
    except Interrupted as exc:
        done = "; the partial output was removed" if args.command == "convert" else ""
        print(f"flexq: interrupted by {exc}{done}", file=sys.stderr)
        return EXIT_SIGNAL[signal.Signals(exc.signum)]
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: set outside Python, which cannot be put back
                signal.signal(sig, handler)


def _interrupt_behind(exc: BaseException) -> Interrupted | None:
    """The interrupt an exception stands for: a C extension turns one raised inside it
    into an exception of its own (pybind11 turns a Ctrl-C during ``import paddle``
    into ``ImportError: initialization failed``, the interrupt as its cause)."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        if isinstance(found, Interrupted):
            return found
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


def _run(args: argparse.Namespace) -> int:
    """Run the command ``args`` name: its exit code, and one line for each failure.

    Each failure branch settles first (:func:`_settle`), so a signal either comes
    before it and the command ends as interrupted, or is ignored.
    """
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        with quiet_paddle():
            return func(args)
    except BrokenPipeError:
        _settle()
        # The reader went away (`flexq inspect ... | head`): stop quietly, as cat does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        _settle()
        interrupt = _interrupt_behind(exc)
        if interrupt is not None:
            raise interrupt from None
        if isinstance(exc, (FlexqError, OSError)):
            if args.debug:  # the traceback, but still the input error's exit code
                traceback.print_exc()
            print(f"flexq: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "paddle":
            if args.debug:
                traceback.print_exc()
            print(f"flexq: error: this needs PaddlePaddle: {PADDLE_INSTALL}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if args.debug:
            raise
        print(
            f"flexq: internal error: {type(exc).__name__}: {exc} (rerun with --debug)",
            file=sys.stderr,
        )
        return 1
