"""SIGINT and SIGTERM at any moment: ``flexq convert`` and a Python-API load end cleanly.

The storms send signals at times spread from 0 s (before the interpreter runs,
then during the imports) to past the end of a run, one process per time, run
after run. Every process must end within 10 s with exactly one of the
documented outcomes (interrupted: one line, exit 130 / 143, no DST; or done:
a complete DST or fully loaded targets), never a traceback, a hang or a
partial result. The in-process tests pin the same at exact moments.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

import flexq
from flexq.cli import convert as convert_module
from flexq.cli.main import main
from flexq.load import write as write_module

from .interrupted_load import START, digest

HERE = Path(__file__).parent
FLEXQ = Path(sys.executable).parent / "flexq"
CHILD = HERE / "interrupted_load.py"
#: The bound on every interrupted process (a hang fails the test, it does not stall it).
BOUND_S = 10
RUNS = 20
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
#: A hung process shows where it hangs when sent SIGABRT.
DUMP_ON_ABORT = {**os.environ, "PYTHONFAULTHANDLER": "1"}
LIBPADDLE = Path(paddle.__file__).parent / "base" / "libpaddle.so"
#: A batch of the API load (its float32 bytes): several batches, so restores are exercised.
INFLIGHT = 4 << 20


def fp8_checkpoint(path: Path, tensors: int, shape: tuple[int, int]) -> Path:
    """A block-FP8 checkpoint (random finite E4M3 codes, 128x128 scale blocks) with
    companions, written directly (no encoder: the storm's checkpoint is made in ms)."""
    rng = np.random.default_rng(23)
    data: dict[str, flexq.RawTensor] = {}
    for i in range(tensors):
        key = f"model.layers.{i}.mlp.up_proj"
        codes = rng.integers(0, 0x7F, size=shape, dtype=np.uint8)  # 0x7F / 0xFF: NaN
        codes |= (rng.integers(0, 2, size=shape, dtype=np.uint8) << 7).astype(np.uint8)
        grid = (-(-shape[0] // 128), -(-shape[1] // 128))
        scales = rng.uniform(1e-3, 1e-2, size=grid).astype(np.float32)
        data[f"{key}.weight"] = flexq.RawTensor("F8_E4M3", codes)
        data[f"{key}.weight_scale_inv"] = flexq.RawTensor.of(scales)
    config = {
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "fp8",
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "weight_block_size": [128, 128],
        },
    }
    flexq.save_checkpoint(path, data, config=config)
    (path / "tokenizer.json").write_text('{"vocab": {"a": 0}}')
    (path / "generation_config.json").write_text('{"do_sample": false}')
    return path


@pytest.fixture(scope="module")
def storm_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fp8_checkpoint(tmp_path_factory.mktemp("storm") / "fp8", 16, (512, 1024))


@pytest.fixture(scope="module")
def reference(
    storm_ckpt: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[float, dict[str, bytes]]:
    """How long an uninterrupted convert of the storm's checkpoint takes, and its DST."""
    assert FLEXQ.is_file(), "the flexq console script is not installed"
    dst = tmp_path_factory.mktemp("reference") / "out"
    total, done = timed(convert_cmd(storm_ckpt, dst))
    assert done.returncode == 0, done.stderr
    return total, files(dst)


@dataclass(frozen=True)
class Ended:
    """How one interrupted process ended."""

    delay: float
    returncode: int
    stdout: str
    stderr: str


def interrupt(cmd: list[str], delay: float, sig: signal.Signals, again: float = 0.05) -> Ended:
    """Start ``cmd``, send ``sig`` after ``delay`` s and once more ``again`` s later
    (a second Ctrl-C during the cleanup), and wait for the end (at most BOUND_S)."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=DUMP_ON_ABORT
    )
    if delay:
        time.sleep(delay)
    proc.send_signal(sig)  # at 0 s: right after exec, before Python takes any signal
    time.sleep(again)
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        states = thread_states(proc.pid)
        proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
        out, err = proc.communicate()
        pytest.fail(
            f"{cmd[:3]} hung after {sig.name} at {delay:.2f} s (threads: {states}): {err[-6000:]}"
        )
    return Ended(delay, proc.returncode, out, err)


def thread_states(pid: int) -> list[str]:
    """Each thread's scheduler state and kernel wait channel (a thread in state D waits
    on the disk and takes no signal, not even faulthandler's)."""
    states = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            stat = (task / "stat").read_text()
            wchan = (task / "wchan").read_text()
        except OSError:
            continue
        states.append(f"{stat[stat.rindex(')') + 2]}:{wchan}")
    return states


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
    return time.monotonic() - start, done


def spread(total: float) -> list[float]:
    """RUNS signal times: 0 s, then from the end of the interpreter's own start-up to
    past ``total`` (the interpreter prints a KeyboardInterrupt of its own while it
    imports ``site``, before any flexq code runs: no program can take a signal then)."""
    startup = max(timed([sys.executable, "-c", ""])[0] for _ in range(3))
    first = 2 * startup
    last = 1.1 * total
    return [0.0] + [first + (last - first) * i / (RUNS - 2) for i in range(RUNS - 1)]


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def convert_cmd(src: Path, dst: Path) -> list[str]:
    return [str(FLEXQ), "convert", str(src), str(dst), "--dtype", "bfloat16",
            "--max-shard-size", "4MB"]  # fmt: skip


def check_convert(ended: Ended, parent: Path, sig: signal.Signals, ref: dict[str, bytes]) -> str:
    """The outcome of one interrupted convert into ``parent/out``: "killed" (before the
    interpreter took signals), "interrupted" or "done"; anything else fails."""
    left = sorted(p.name for p in parent.iterdir())
    where = f"{sig.name} at {ended.delay:.2f} s: rc {ended.returncode}, stderr {ended.stderr!r}"
    if ended.returncode == -sig and ended.delay == 0:
        assert (ended.stdout, ended.stderr, left) == ("", "", []), where
        return "killed"
    if ended.returncode == EXIT[sig]:
        line = f"flexq: interrupted by {sig.name}; the partial output was removed\n"
        assert ended.stderr == line, where
        assert ended.stdout == "", where
        assert left == [], where  # no DST, no temporary directory
        return "interrupted"
    assert ended.returncode == 0, where
    assert ended.stderr == "", where
    assert ended.stdout.startswith("wrote 16 tensors"), where
    assert left == ["out"], where
    assert files(parent / "out") == ref, where
    return "done"


@pytest.mark.storm
def test_a_sigint_storm_during_convert_leaves_no_dst_or_a_complete_one(
    storm_ckpt: Path, reference: tuple[float, dict[str, bytes]], tmp_path: Path
) -> None:
    total, ref = reference
    source = files(storm_ckpt)
    outcomes = []
    for i, delay in enumerate(spread(total)):
        parent = tmp_path / f"run{i}"
        parent.mkdir()
        ended = interrupt(convert_cmd(storm_ckpt, parent / "out"), delay, signal.SIGINT)
        outcomes.append(check_convert(ended, parent, signal.SIGINT, ref))
    assert "interrupted" in outcomes, outcomes
    assert files(storm_ckpt) == source


@pytest.mark.parametrize("phase", ["early", "temporary directory", "first shard", "dst"])
def test_sigterm_at_each_phase_of_convert_ends_in_one_documented_outcome(
    storm_ckpt: Path, reference: tuple[float, dict[str, bytes]], tmp_path: Path, phase: str
) -> None:
    """SIGTERM once convert reaches ``phase`` (a quarter of its run, or what it has
    written, watched on the file system): interrupted with nothing left, or (once DST
    is in place) done and complete."""
    total, ref = reference
    parent = tmp_path / "run"
    parent.mkdir()
    proc = subprocess.Popen(
        convert_cmd(storm_ckpt, parent / "out"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    start = time.monotonic()
    while proc.poll() is None and time.monotonic() - start < 60:
        tmp = [p for p in parent.iterdir() if p.name != "out"]
        reached = {
            "early": time.monotonic() - start > total / 4,
            "temporary directory": bool(tmp),
            "first shard": bool(tmp) and any(tmp[0].glob("*.safetensors")),
            "dst": (parent / "out").exists(),
        }[phase]
        if reached:
            break
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=BOUND_S)
    outcome = check_convert(Ended(-1, proc.returncode, out, err), parent, signal.SIGTERM, ref)
    if phase == "dst":
        assert outcome == "done"


@pytest.mark.storm
def test_a_sigint_storm_during_an_atomic_api_load_leaves_old_or_new_targets(
    storm_ckpt: Path,
) -> None:
    cmd = [sys.executable, "-W", "ignore", str(CHILD), str(storm_ckpt), str(INFLIGHT)]
    total, done = timed(cmd)
    assert done.returncode == 0, done.stderr
    loaded, after = done.stdout.split("\n")[0].split()
    assert loaded == "loaded"
    ct = flexq.compose(storm_ckpt)
    start = {k: paddle.full(list(e.shape), START, dtype="bfloat16") for k, e in ct.entries.items()}
    before = digest(start)
    outcomes = []
    for delay in spread(total):
        ended = interrupt(cmd, delay, signal.SIGINT, again=BOUND_S)  # one signal per run
        where = f"SIGINT at {ended.delay:.2f} s: rc {ended.returncode}, stderr {ended.stderr!r}"
        if ended.returncode == -signal.SIGINT and ended.delay == 0:
            assert (ended.stdout, ended.stderr) == ("", ""), where
            outcomes.append("killed")
            continue
        lines = ended.stdout.splitlines()
        lost = "lost an interrupt Python could not raise"
        result, threads = [line for line in lines if line != lost]
        # Interrupted in the caller's own `import paddle` (before flexq runs), Paddle is
        # left half-initialised, and its teardown was once seen to end the process by
        # the signal after the outcome was printed.
        assert ended.returncode in ((0, -signal.SIGINT) if result == "interrupted -" else (0,)), (
            where
        )
        # Paddle prints this itself when its own import (the caller's, before flexq
        # runs) is interrupted inside its C extension.
        paddle_import = f"Error: Can not import paddle core while this file exists: {LIBPADDLE}\n"
        assert ended.stderr in ("", paddle_import if result == "interrupted -" else ""), where
        assert threads == "threads 0", where  # nothing left to hold up the exit
        outcome, value = result.split()
        if outcome == "loaded":
            assert value == after, where
        else:
            assert outcome == "interrupted", where
            # Targets not made yet, untouched or restored, or (interrupted while the last
            # batch was written) complete: never a mix.
            assert value in ("-", before, after), where
        outcomes.append(f"{outcome} {'-' if value == '-' else 'old' if value == before else 'new'}")
    assert any(o.startswith("interrupted") for o in outcomes), outcomes


# -- exact moments, in process -----------------------------------------------------------


@pytest.fixture
def small_ckpt(tmp_path: Path) -> Path:
    return fp8_checkpoint(tmp_path / "small", 4, (128, 256))


def _interrupt_at(monkeypatch: pytest.MonkeyPatch, target: Any, name: str, at: int) -> None:
    """SIGINT raised (as Ctrl-C would) right after the ``at``-th call of ``target.name``."""
    real = getattr(target, name)
    calls = [0]

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        calls[0] += 1
        if calls[0] == at:
            signal.raise_signal(signal.SIGINT)
        return result

    monkeypatch.setattr(target, name, interrupted)


def _targets(ckpt: Path) -> dict[str, Any]:
    ct = flexq.compose(ckpt)
    return {k: paddle.full(list(e.shape), START, dtype="bfloat16") for k, e in ct.entries.items()}


@pytest.mark.parametrize(("inflight", "batches"), [(128 * 256 * 4, 4), (1 << 30, 1)])
def test_ctrl_c_between_the_writes_of_an_atomic_load_leaves_all_old_or_all_new(
    small_ckpt: Path, monkeypatch: pytest.MonkeyPatch, inflight: int, batches: int
) -> None:
    """Interrupted after any one of its writes, an atomic load restores every target, or
    (interrupted while its last batch is written) completes first: never a mix."""
    full = _targets(small_ckpt)
    report = flexq.load_state_dict(full, small_ckpt, atomic=True, max_inflight_bytes=inflight)
    assert report.batches == batches
    old, new = digest(_targets(small_ckpt)), digest(full)
    seen = []
    for at in range(1, report.pieces + 1):
        with monkeypatch.context() as m:
            _interrupt_at(m, write_module, "write", at)
            targets = _targets(small_ckpt)
            with pytest.raises(KeyboardInterrupt):
                flexq.load_state_dict(targets, small_ckpt, atomic=True, max_inflight_bytes=inflight)
        now = digest(targets)
        assert now in (old, new), f"a mix after an interrupt at write {at}"
        seen.append("new" if now == new else "old")
    last = report.pieces // batches  # the writes of the last batch
    assert seen == ["old"] * (report.pieces - last) + ["new"] * last
    main_thread = threading.main_thread()
    assert [t for t in threading.enumerate() if t is not main_thread and not t.daemon] == []


def test_a_signal_noted_during_the_imports_ends_the_command_as_interrupted(
    small_ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["convert", str(small_ckpt), str(tmp_path / "out")], noted=[signal.SIGTERM])
    assert code == 143
    captured = capsys.readouterr()
    assert captured.err == "flexq: interrupted by SIGTERM; the partial output was removed\n"
    assert captured.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small"]


def test_ctrl_c_inside_a_c_extension_is_still_an_interrupt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """pybind11 turns a Ctrl-C during ``import paddle`` into ImportError (the interrupt
    its cause): the command still ends as interrupted, in one line."""
    cli = importlib.import_module("flexq.cli.main")  # (flexq.cli.main is also the function)

    def list_formats(args: Any) -> int:
        try:
            signal.raise_signal(signal.SIGINT)  # the handler raises in here
        except BaseException as exc:
            raise ImportError("initialization failed") from exc
        return 0

    monkeypatch.setattr(cli, "_list_formats", list_formats)
    assert main(["list-formats"]) == 130
    assert capsys.readouterr().err == "flexq: interrupted by SIGINT\n"


def test_a_signal_while_dst_is_renamed_into_place_leaves_it_complete(
    small_ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """SIGINT right after the rename of a --force replacement: the command reports
    success (DST is complete), and the old output it moved aside is gone."""
    out = tmp_path / "out"
    assert main(["convert", str(small_ckpt), str(out)]) == 0
    ref = files(out)
    (out / "model.safetensors").write_bytes(b"an older output")
    _interrupt_at(monkeypatch, convert_module, "_replace", 1)
    assert main(["convert", str(small_ckpt), str(out), "--force"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.splitlines()[-1].startswith("wrote 4 tensors")
    assert files(out) == ref
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "small"]


def test_the_api_convert_raises_the_interrupt_after_the_rename_and_cleans_up(
    small_ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    convert_module.convert(small_ckpt, out)
    ref = files(out)
    (out / "model.safetensors").write_bytes(b"an older output")
    _interrupt_at(monkeypatch, convert_module, "_replace", 1)
    with pytest.raises(KeyboardInterrupt):
        convert_module.convert(small_ckpt, out, force=True)
    assert files(out) == ref
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "small"]


def test_the_reliability_page_lists_these_tests_by_name() -> None:
    """docs/reliability.md's block on interrupts, full disks and companion links names
    every test of this module and of test_convert_faults.py, and only tests that exist
    (there, in the core's thread and interrupt tests, or in test_fetch_ahead.py and
    test_read_in_parts.py)."""
    text = (HERE.parent / "docs" / "reliability.md").read_text()
    block = text.split("## Interrupts, full disks and companion links", 1)[1].split("\n## ")[0]
    named = set(re.findall(r"`(test_\w+)`", block))
    core = HERE.parent / "packages" / "core" / "tests"
    sources = [Path(__file__), HERE / "test_convert_faults.py"]
    defined = {
        path: set(re.findall(r"^def (test_\w+)", path.read_text(), flags=re.M))
        for path in [
            *sources,
            core / "test_core_threads.py",
            core / "test_core_interrupts.py",
            HERE / "test_fetch_ahead.py",
            HERE / "test_read_in_parts.py",
        ]
    }
    mine = set().union(*(defined[p] for p in sources)) - {
        "test_the_reliability_page_lists_these_tests_by_name"
    }
    assert named <= set().union(*defined.values())
    assert mine <= named
