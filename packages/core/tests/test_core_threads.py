"""The shared worker threads: FLEXQ_THREADS, inline runs, and use after a fork."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import flexq
from flexq.errors import FlexqError
from flexq.formatkit import RUNS_PER_TASK, run_in_row_bands
from flexq.formatkit.rounding import float32_to_bfloat16_bits
from flexq.formatkit.threads import run_on_threads, thread_count


def threads_used(items: int, most: int) -> tuple[set[str], list[int]]:
    names: set[str] = set()
    seen: list[int] = []
    lock = threading.Lock()

    def work(part: Sequence[int]) -> None:
        with lock:
            names.add(threading.current_thread().name)
            seen.extend(part)

    run_on_threads(work, range(items), most)
    return names, sorted(seen)


def test_one_thread_runs_inline_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEXQ_THREADS", "1")
    names, seen = threads_used(40, 3)
    assert names == {threading.current_thread().name}
    assert seen == list(range(40))


def test_flexq_threads_sets_the_pool_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEXQ_THREADS", "3")
    assert thread_count() == 3
    names, seen = threads_used(60, 1)
    assert seen == list(range(60))  # every item once
    assert 1 <= len(names) <= 3
    assert all(n.startswith("flexq-numpy") for n in names)


@pytest.mark.parametrize("value", ["0", "-2", "four", "1.5"])
def test_a_bad_flexq_threads_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("FLEXQ_THREADS", value)
    with pytest.raises(FlexqError, match=r"FLEXQ_THREADS=.*positive whole number"):
        thread_count()


def _round_in_child(queue: multiprocessing.Queue[bool]) -> None:
    x = np.arange(1 << 20, dtype=np.float32)
    queue.put(bool((float32_to_bfloat16_bits(x)[:4] == [0, 0x3F80, 0x4000, 0x4040]).all()))


def test_a_forked_child_gets_its_own_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child forked after the pool started (a DataLoader worker) must not wait
    on the parent's threads, which it does not have."""
    monkeypatch.setenv("FLEXQ_THREADS", "2")
    float32_to_bfloat16_bits(np.ones(1 << 20, np.float32))  # the parent's pool is running
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[bool] = ctx.Queue()
    child = ctx.Process(target=_round_in_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive, "the forked child hung on the inherited thread pool"
    assert child.exitcode == 0
    assert queue.get(timeout=5)


def test_the_cli_reports_a_bad_flexq_threads_in_one_line(tmp_path: Path) -> None:
    src = flexq.save_checkpoint(
        tmp_path / "c", {"w": flexq.RawTensor.of(np.ones((4, 4), np.float32))}
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flexq.cli",
            "convert",
            str(src),
            str(tmp_path / "out"),
            "--dtype",
            "bfloat16",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "FLEXQ_THREADS": "0"},
    )
    assert proc.returncode == 2
    assert (
        proc.stderr
        == "flexq: error: FLEXQ_THREADS='0': expected a positive whole number of threads\n"
    )
    assert not (tmp_path / "out").exists()


def test_row_runs_cover_every_row_once_on_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEXQ_THREADS", "2")
    rows: list[int] = []
    calls: list[int] = []
    lock = threading.Lock()

    def work(runs: Sequence[range]) -> None:
        with lock:
            calls.append(len(runs))
            rows.extend(r for run in runs for r in run)

    run_in_row_bands(work, 5000, 4096)  # 64 rows per cache-sized run: 79 runs
    assert sorted(rows) == list(range(5000))
    assert max(calls) <= RUNS_PER_TASK
    assert len(calls) > 1


def test_the_workers_never_hold_up_the_end_of_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Daemon threads: the interpreter does not join them at exit (a non-daemon pool
    hung `flexq convert` forever after a Ctrl-C that came while it started a worker)."""
    monkeypatch.setenv("FLEXQ_THREADS", "2")
    names, _ = threads_used(8, 1)
    workers = [t for t in threading.enumerate() if t.name in names]
    assert workers
    assert all(t.daemon for t in workers)


def test_an_interrupt_drops_the_parts_not_started_and_waits_for_the_running_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while run_on_threads waits: it raises only once no part is running, so no
    worker writes into the caller's arrays after the caller has moved on."""
    monkeypatch.setenv("FLEXQ_THREADS", "2")
    lock = threading.Lock()
    running: list[int] = []
    finished: list[int] = []
    release = threading.Event()

    def work(part: Sequence[int]) -> None:
        with lock:
            running.append(part[0])
        if part[0] == 0:
            signal.raise_signal(signal.SIGINT)  # handled in the main thread, which waits
        release.wait(0.05)  # a part takes a while: the interrupt lands mid-run
        with lock:
            finished.append(part[0])

    with pytest.raises(KeyboardInterrupt):
        run_on_threads(work, range(200), 1)
    with lock:
        assert sorted(running) == sorted(finished)  # nothing still running
        ran = len(running)
    assert ran < 200  # the rest were dropped
    release.wait(0.2)
    assert len(running) == ran  # and none started later


def test_an_error_in_one_part_is_raised_once_the_others_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEXQ_THREADS", "3")
    lock = threading.Lock()
    active = [0]
    active_at_raise: list[int] = []

    def work(part: Sequence[int]) -> None:
        with lock:
            active[0] += 1
        try:
            threading.Event().wait(0.01)
            if part[0] == 5:
                raise ValueError("part 5 is bad")
        finally:
            with lock:
                active[0] -= 1

    def run() -> None:
        try:
            run_on_threads(work, range(60), 1)
        finally:
            active_at_raise.append(active[0])

    with pytest.raises(ValueError, match="part 5 is bad"):
        run()
    assert active_at_raise == [0]
