"""A default load reads ahead of its decode: while piece k decodes, the kernel is already
fetching the pages of the pieces after it (``POSIX_FADV_WILLNEED`` over exactly the spans
their reads read), within a bounded window, and nothing of it lands in the process.

The cold-cache figures this buys are the bench's (``nox -s bench -- physical``): tests
may not drop the page cache, so they pin the order and the bounds of the requests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

import flexq
from flexq.errors import CheckpointError
from flexq.load import readahead
from flexq_fp8 import save_fp8_checkpoint

from .conftest import LINEARS, assert_loaded_as_composed, weights

Event = tuple[str, Any]


@pytest.fixture
def fp8_path(tmp_path: Path) -> Path:
    return save_fp8_checkpoint(tmp_path / "fp8", weights(), layout="block", block_size=(32, 32))


def record_advice(monkeypatch: pytest.MonkeyPatch, events: list[Event]) -> None:
    """Append ("willneed", (file, start, stop)) for every WILLNEED the reader gives (the
    real call still made) and ("read", (file, start, stop)) for every ``preadv`` that may
    wait for the disk; a ``RWF_NOWAIT`` one copies only what the page cache holds
    ("cached": nothing to ask for first)."""
    real_advise, real_preadv = os.posix_fadvise, os.preadv

    def name(fd: int) -> str:
        return Path(os.readlink(f"/proc/self/fd/{fd}")).name

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_WILLNEED:
            events.append(("willneed", (name(fd), offset, offset + length)))
        real_advise(fd, offset, length, advice)

    def preadv(fd: int, buffers: list[memoryview], offset: int, flags: int = 0) -> int:
        got = real_preadv(fd, buffers, offset, flags)
        events.append(("cached" if flags else "read", (name(fd), offset, offset + got)))
        return got

    monkeypatch.setattr(os, "posix_fadvise", advise)
    monkeypatch.setattr(os, "preadv", preadv)


def covered(events: list[Event], file: str, start: int, stop: int) -> bool:
    """Whether the WILLNEED requests among ``events`` cover [start, stop) of ``file``."""
    asked = sorted((a, b) for f, a, b in ranges(events, "willneed") if f == file)
    at = start
    for a, b in asked:
        if a <= at < b:
            at = b
    return at >= stop


def overlapped(events: list[Event], file: str, start: int, stop: int) -> bool:
    """Whether any WILLNEED request among ``events`` touches [start, stop) of ``file``."""
    return any(f == file and a < stop and start < b for f, a, b in ranges(events, "willneed"))


def ranges(events: list[Event], kind: str) -> list[tuple[str, int, int]]:
    """The (file, start, stop) of the ``kind`` events ("willneed", "read" or "cached")."""
    return [r for k, r in events if k == kind]


def load_recorded(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Event], list[str]]:
    """A default load's events, and the keys its pieces were written in (last applies),
    the window's advice all given on the load's thread, however long its calls take: the
    window's order against the reads, without the adviser thread's timing (its own tests
    are below)."""
    events: list[Event] = []
    record_advice(monkeypatch, events)
    monkeypatch.setattr(readahead, "COLD_CALL_S", float("inf"))
    real = flexq.plugin.manager.registry.manager.hook.flexq_apply.get_hookimpls()
    impl = next(i for i in real if i.plugin_name == "fp8")
    function = impl.function

    def marked(*args: Any, **kwargs: Any) -> Any:
        key = (dict(zip(impl.argnames, args, strict=False)) | kwargs)["logical_key"]
        events.append(("apply", key))
        return function(*args, **kwargs)

    monkeypatch.setattr(impl, "function", marked)
    sd = {k: paddle.full(list(s), 7.0) for k, s in LINEARS.items()}
    report = flexq.load_state_dict(sd, path)
    done = len(events)  # what the load did; the checks below are not its
    assert_loaded_as_composed(sd, path)
    del events[done:]
    return events, [key for kind, key in events if kind == "apply"][-report.pieces :]


def weight_range(path: Path, key: str) -> tuple[str, int, int]:
    with flexq.Checkpoint(path) as ck:
        info = ck.info(key)
        return info.file, info.start, info.start + info.nbytes


def test_the_next_piece_is_queued_before_this_one_decodes(
    fp8_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events, order = load_recorded(fp8_path, monkeypatch)
    assert sorted(order) == sorted(LINEARS)
    applied = [i for i, (kind, _) in enumerate(events) if kind == "apply"][-len(order) :]
    for k in range(len(order) - 1):
        # Everything the next piece's weight read reads was asked for before this decode.
        assert covered(events[: applied[k]], *weight_range(fp8_path, order[k + 1])), order[k]
    # Every read that may wait was asked for first (its own request at the latest): no read
    # waits on a page the kernel was not already fetching; copies of what the page cache
    # holds ("cached") wait for nothing. No request is wider than the reads.
    reads = ranges(events, "read") + ranges(events, "cached")
    asked = ranges(events, "willneed")
    assert reads
    for i, (kind, r) in enumerate(events):
        if kind == "read":
            assert covered(events[:i], *r), r
    read_pages = {(f, p) for f, a, b in reads for p in range(a // 4096, (b - 1) // 4096 + 1)}
    asked_pages = {(f, p) for f, a, b in asked for p in range(a // 4096, (b - 1) // 4096 + 1)}
    assert asked_pages == read_pages


def test_the_window_stops_at_its_budget(fp8_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A budget below one piece: the piece being read and the next one, nothing further.
    monkeypatch.setattr(readahead, "READ_AHEAD_BYTES", 1)
    events, order = load_recorded(fp8_path, monkeypatch)
    applied = [i for i, (kind, _) in enumerate(events) if kind == "apply"][-len(order) :]
    # The check before the first write reads (and decodes) the smallest piece on its own.
    probed = {key for kind, key in events[: applied[0]] if kind == "apply"}
    assert len(probed) == 1
    for k in range(len(order) - 2):
        before = events[: applied[k]]
        assert covered(before, *weight_range(fp8_path, order[k + 1])), order[k]
        if order[k + 2] not in probed:
            assert not overlapped(before, *weight_range(fp8_path, order[k + 2])), order[k]


def test_a_prefetch_asks_for_the_spans_a_read_reads_and_reads_nothing(
    fp8_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "model.layers.0.mlp.down_proj.weight"  # 64 x 96 bytes: 64 runs of a column slice
    with flexq.Checkpoint(fp8_path) as ck:
        events: list[Event] = []
        record_advice(monkeypatch, events)
        ck.prefetch(key, (0, 32), (64, 48))
        assert (ck.bytes_read, ck.pages_read_bytes) == (0, 0)
        assert [kind for kind, _ in events] == ["willneed"]
        asked = list(events)
        events.clear()
        got = ck.read(key, (0, 32), (64, 48))
        info = ck.info(key)
        np.testing.assert_array_equal(
            got,
            np.frombuffer(
                Path(fp8_path / info.file).read_bytes(), np.uint8, info.nbytes, info.start
            ).reshape(64, 96)[:, 32:80],
        )
        # The read's own request is the same span, and it reads within it.
        assert [e for e in events if e[0] == "willneed"] == asked
        (_, (f, lo, hi)) = asked[0]
        assert all(f == rf and lo <= a and b <= hi for rf, a, b in ranges(events, "read"))


def test_a_prefetch_out_of_bounds_is_an_error_naming_file_and_tensor(fp8_path: Path) -> None:
    key = "model.layers.0.mlp.down_proj.weight"
    with flexq.Checkpoint(fp8_path) as ck:
        info = ck.info(key)
        with pytest.raises(CheckpointError, match=rf"{info.file}.*{key}.*out of bounds"):
            ck.prefetch(key, (0, 64), (64, 48))


class Queued:
    """A source that records which pieces it was asked to prefetch (the window's arithmetic
    alone; the loads above show the real source honours it)."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def prefetch(self, index: int, keys: Any = None) -> None:
        self.asked.append(index)


def test_the_window_slides_by_bytes_and_always_holds_the_next_piece() -> None:
    src = Queued()
    ahead = readahead.ReadAhead(src, [10, 10, 30, 10, 10, 10], budget=25)
    ahead.before(0)
    assert src.asked == [0, 1]  # 0 and 1 fit (20); 2 would make 50
    ahead.before(1)
    assert src.asked == [0, 1, 2]  # the next piece whatever its size
    ahead.before(2)
    assert src.asked == [0, 1, 2, 3]  # 2 and 3 are 40: over the budget, yet 3 is next
    ahead.before(3)
    assert src.asked == [0, 1, 2, 3, 4]  # 3 and 4 are 20; 5 would make 30
    ahead.before(4)
    assert src.asked == [0, 1, 2, 3, 4, 5]  # 4 and 5: 20
    ahead.before(5)
    assert src.asked == [0, 1, 2, 3, 4, 5]  # nothing is asked for twice


def test_a_load_gives_its_window_advice_on_the_adviser_thread_while_it_decodes(
    fp8_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each WILLNEED of the window takes 200 ms here (a cold disk's queueing): the first
    call, on the load's thread, shows the pages on disk, and the later advice goes to the
    adviser thread while the load's decodes run on its own, which ends with no advice
    running. (The first decode waits until the adviser is in a call: a thread started on a
    busy machine may not run before a tiny load ends, its advice then rightly dropped.)"""
    import threading
    import time

    real_advise = os.posix_fadvise
    calls: list[tuple[str, float, float]] = []  # (thread, start, end)
    applies: list[float] = []
    advising = threading.Event()

    def slow(fd: int, offset: int, length: int, advice: int) -> None:
        if advice != os.POSIX_FADV_WILLNEED:
            return real_advise(fd, offset, length, advice)
        start, name = time.perf_counter(), threading.current_thread().name
        if name == "flexq-read-ahead":
            advising.set()
        time.sleep(0.2)
        real_advise(fd, offset, length, advice)
        calls.append((name, start, time.perf_counter()))
        return None

    monkeypatch.setattr(os, "posix_fadvise", slow)
    impl = next(
        i
        for i in flexq.plugin.manager.registry.manager.hook.flexq_apply.get_hookimpls()
        if i.plugin_name == "fp8"
    )
    function = impl.function

    def marked(*args: Any, **kwargs: Any) -> Any:
        assert advising.wait(10)
        applies.append(time.perf_counter())
        return function(*args, **kwargs)

    monkeypatch.setattr(impl, "function", marked)
    sd = {k: paddle.full(list(s), 7.0) for k, s in LINEARS.items()}
    flexq.load_state_dict(sd, fp8_path)
    ended = time.perf_counter()
    assert_loaded_as_composed(sd, fp8_path)
    advised = [(a, b) for name, a, b in calls if name == "flexq-read-ahead"]
    assert advised, calls  # the window's advice came from the adviser thread
    # after the first, on the load's thread: the call that showed the cache cold
    assert calls[0][0] == "MainThread"
    # a decode ran while the adviser was in a call: the load did not wait for the advice
    assert any(a < t < b for t in applies for a, b in advised)
    assert max(b for _, b in advised) <= ended  # none was left running after the load
    assert not any(t.name == "flexq-read-ahead" for t in threading.enumerate())


class Asked:
    """A source whose prefetch records the pieces asked for and the thread each was given
    on, taking ``slow`` seconds for the pieces in ``slow_pieces`` (every piece when None),
    failing on ``bad``."""

    def __init__(
        self, slow: float = 0.0, bad: int | None = None, slow_pieces: set[int] | None = None
    ) -> None:
        import threading

        self.asked: list[int] = []
        self.threads: list[str] = []
        self.slow, self.bad, self.slow_pieces = slow, bad, slow_pieces
        self.on_adviser = threading.Event()  # set when a prefetch begins on the adviser

    def prefetch(self, index: int, keys: Any = None) -> None:
        import threading
        import time

        name = threading.current_thread().name
        if name == "flexq-read-ahead":
            self.on_adviser.set()
        if self.slow_pieces is None or index in self.slow_pieces:
            time.sleep(self.slow)
        if index == self.bad:
            raise CheckpointError(f"piece {index}: the file was cut")
        self.asked.append(index)
        self.threads.append(name)

    def wait_for(self, pieces: int) -> None:
        """Until ``pieces`` pieces were given (at most 10 s: the adviser may start late)."""
        import time

        deadline = time.monotonic() + 10
        while len(self.asked) < pieces and time.monotonic() < deadline:
            time.sleep(0.01)


def adviser_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name == "flexq-read-ahead"]


def test_quick_advice_is_given_on_the_load_s_thread_and_starts_no_thread() -> None:
    """Cached pages: each call returns at once, so each is made where it is asked for, in
    order; a failed hint is only lost."""
    src = Asked(bad=1)
    adviser = readahead.AdviceThread(src)
    for i in range(4):
        adviser.prefetch(i)
    assert src.asked == [0, 2, 3]
    assert set(src.threads) == {"MainThread"}
    assert not adviser_threads()
    adviser.close()


def test_advice_moves_to_the_adviser_thread_from_the_first_slow_call() -> None:
    """Pieces 0 and 1 quick, piece 2 slow (its pages on disk): 0-2 are given on the load's
    thread, the later ones on the adviser thread, still in order."""
    src = Asked(slow=2 * readahead.COLD_CALL_S, slow_pieces={2})
    adviser = readahead.AdviceThread(src)
    for i in range(5):
        adviser.prefetch(i)
    src.wait_for(5)
    adviser.close()
    assert src.asked == [0, 1, 2, 3, 4]
    assert src.threads == ["MainThread"] * 3 + ["flexq-read-ahead"] * 2
    assert not adviser_threads()


def test_the_adviser_gives_advice_in_order_and_outlives_a_failed_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(readahead, "COLD_CALL_S", 0.0)  # every call counts as slow
    src = Asked(bad=2)
    adviser = readahead.AdviceThread(src)
    for i in range(5):
        adviser.prefetch(i)
    src.wait_for(4)
    adviser.close()
    # piece 2's failure is only a hint lost: its read reports it, on the load's thread
    assert src.asked == [0, 1, 3, 4]
    assert src.threads == ["MainThread"] + ["flexq-read-ahead"] * 3


def test_closing_the_adviser_drops_what_it_has_not_given() -> None:
    import time

    src = Asked(slow=0.2)
    adviser = readahead.AdviceThread(src)
    for i in range(5):
        adviser.prefetch(i)  # piece 0 on the load's thread (slow), the rest queued
    assert src.on_adviser.wait(10)  # piece 1's advice is being given
    adviser.close()  # waits for that one call, drops the rest
    given = list(src.asked)
    assert given == [0, 1]
    adviser.prefetch(5)  # a closed adviser takes nothing more
    time.sleep(0.3)
    assert src.asked == given
    assert not adviser_threads()
