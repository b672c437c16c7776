"""The flexq command as a person at a terminal sees it: under a pseudo-terminal, and its --help.

Help snapshots live in snapshots/; ``FLEXQ_REGENERATE=1 pytest`` rewrites them
after a deliberate change to the parser.
"""

from __future__ import annotations

import argparse
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import flexq
from flexq.cli.main import build_parser

SNAPSHOTS = Path(__file__).parent / "snapshots"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
COMMANDS = ("list-formats", "inspect", "convert", "demo", "verify")


def on_terminal(*args: str, **env: str) -> tuple[int, str]:
    """Run ``flexq ARGS`` with stdin, stdout and stderr on a pseudo-terminal; (exit code,
    everything it printed, ANSI codes removed)."""
    main, child = pty.openpty()
    environ = {**os.environ, "COLUMNS": "120", "LINES": "40", "TERM": "xterm", **env}
    environ.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "flexq.cli", *args],
        stdin=child,
        stdout=child,
        stderr=child,
        env=environ,
        close_fds=True,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    code = proc.wait(timeout=120)
    return code, ANSI.sub("", b"".join(chunks).decode(errors="replace"))


def many_tensors(path: Path) -> Path:
    rng = np.random.default_rng(0)
    tensors = {
        f"t{i:03d}": flexq.RawTensor.of(rng.standard_normal((256, 256)).astype(np.float32))
        for i in range(24)
    }
    return flexq.save_checkpoint(path, tensors)


def test_convert_shows_progress_in_bytes_with_rate_and_time_left(tmp_path: Path) -> None:
    src = many_tensors(tmp_path / "src")
    code, text = on_terminal("convert", str(src), str(tmp_path / "out"), "--formats", "")
    assert code == 0, text
    total = 24 * 256 * 256 * 4 / 1e6  # rich counts decimal megabytes
    assert re.search(rf"{total:.1f}/{total:.1f} MB", text), text
    assert re.search(r"\d+(\.\d+)? [kMG]?B/s", text), text
    assert re.search(r"\d:\d\d:\d\d", text), text  # the time-left column
    assert "24 tensors" in text
    assert "bytes/s" not in text  # no tensor counts labelled as bytes


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (("inspect", "{tmp}/missing"), {}, "missing: no such directory"),
        (("inspect", "{src}/model.safetensors"), {}, "is a file; pass the checkpoint directory"),
        (("convert", "{src}", "{tmp}/afile"), {}, "DST is a file, not a directory"),
        (("convert", "{src}", "{tmp}"), {}, "DST contains the checkpoint"),
        (("inspect", "{src}"), {"FLEXQ_FORMATS": "nosuch"}, "FLEXQ_FORMATS='nosuch' names"),
        (("inspect", "{src}", "--formats", "fp9"), {}, "format 'fp9' is not installed"),
    ],
)
def test_each_mistake_is_one_line_on_the_terminal(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    src = many_tensors(tmp_path / "src")
    (tmp_path / "afile").write_text("x")
    argv = [a.format(tmp=tmp_path, src=src) for a in args]
    code, text = on_terminal(*argv, **env)
    assert code == 2
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert lines[0].startswith("flexq: error: ")
    assert message in lines[0]


def help_text(command: str | None) -> str:
    parser = build_parser()
    if command is None:
        return parser.format_help()
    sub = next(a for a in parser._actions if a.dest == "command")
    text: str = sub.choices[command].format_help()  # type: ignore[index]
    return text


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_matches_its_snapshot(command: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")
    # The footer names this checkout's docs by their full path, which differs per clone.
    text = help_text(command).replace(str(Path(__file__).resolve().parents[3]), "CHECKOUT")
    snapshot = SNAPSHOTS / f"help-{command or 'flexq'}.txt"
    if os.environ.get("FLEXQ_REGENERATE"):
        SNAPSHOTS.mkdir(exist_ok=True)
        snapshot.write_text(text)
    assert text == snapshot.read_text(), f"rerun with FLEXQ_REGENERATE=1 to update {snapshot}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_argument_has_help_and_shows_its_default(command: str) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for action in sub.choices[command]._actions:  # type: ignore[index]
        assert action.help, f"flexq {command}: {action.dest} has no help"
        if isinstance(action.default, str) and action.default != argparse.SUPPRESS:
            text = " ".join(help_text(command).split())
            assert f"(default: {action.default})" in text


def test_version_and_debug_after_the_subcommand(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "flexq.cli", "--version"], capture_output=True, text=True
    )
    assert proc.stdout.strip() == f"flexq {flexq.__version__}"
    proc = subprocess.run(
        [sys.executable, "-m", "flexq.cli", "inspect", str(tmp_path / "nope"), "--debug"],
        capture_output=True,
        text=True,
    )
    assert "Traceback" in proc.stderr
    assert "CheckpointError" in proc.stderr


def test_inspect_folds_long_names_on_a_narrow_terminal_instead_of_cutting_them(
    tmp_path: Path,
) -> None:
    key = "model.layers.17.self_attn.a_projection_with_a_long_descriptive_name.weight"
    path = flexq.save_checkpoint(
        tmp_path / "c", {key: flexq.RawTensor.of(np.ones((2, 3), np.float32))}
    )
    code, text = on_terminal("inspect", str(path), "--formats", "", COLUMNS="70")
    assert code == 0, text
    assert "…" not in text
    # the name column: what each logical tensor's line holds before its format column
    first_column = "".join(
        re.split(r"\s{2,}", line.strip())[0]
        for line in text.splitlines()
        if re.match(r"  \S", line) and "tensor / stored component" not in line
    )
    assert key in first_column, text
    assert max(len(line) for line in text.splitlines()) <= 70
