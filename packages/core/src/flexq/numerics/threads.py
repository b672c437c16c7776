"""The worker threads flexq's bulk numpy work shares (lookups, bfloat16 rounding).

numpy releases the GIL inside its array loops, so a few threads each running
numpy calls over their own part of an array use every core a load may run on.
One pool for the process: decoding and rounding never run nested. The number
of threads is ``FLEXQ_THREADS`` if set, else the cores this process may run on,
at most 4 (several ranks usually share a node).

The workers are daemon threads, so they never hold up the end of the process:
``concurrent.futures.ThreadPoolExecutor``'s are not (the interpreter joins them
at exit, and a Ctrl-C that lands while it starts one leaves a worker nobody
wakes: the process never ends). :func:`run_on_threads` returns or raises only when
none of its parts is running any more, interrupted or not, so no worker writes
into the caller's arrays after it has moved on.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from flexq.errors import FlexqError

T = TypeVar("T")

_pool: _Workers | None = None
_lock = threading.Lock()


def thread_count() -> int:
    """Worker threads: ``FLEXQ_THREADS``, else the cores this process may run on, at most 4.

    :raises FlexqError: when ``FLEXQ_THREADS`` is not a positive integer.
    """
    value = os.environ.get("FLEXQ_THREADS", "").strip()
    if not value:
        return min(4, cores())
    if not value.isdigit() or int(value) < 1:
        raise FlexqError(f"FLEXQ_THREADS={value!r}: expected a positive whole number of threads")
    return int(value)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def spare_cores() -> int:
    """Cores this process may run on beyond its worker threads (0 when they take them all):
    where other work can run beside a decode without taking a core from it."""
    return max(0, cores() - thread_count())


class _Batch(Generic[T]):
    """The parts of one :func:`run_on_threads` call, handed to whichever worker asks next."""

    def __init__(self, work: Callable[[Sequence[T]], None], parts: list[Sequence[T]]) -> None:
        self._work = work
        self._parts = parts
        self._next = 0
        self._running = 0
        self._error: BaseException | None = None
        self._changed = threading.Condition()

    def serve(self) -> None:
        """Run parts until none is left (on a worker); the first exception stops the batch."""
        while True:
            with self._changed:
                if self._error is not None or self._next == len(self._parts):
                    return
                part = self._parts[self._next]
                self._next += 1
                self._running += 1
            try:
                self._work(part)
            except BaseException as exc:  # handed to the caller, which raises it
                with self._changed:
                    self._error = self._error or exc
            finally:
                with self._changed:
                    self._running -= 1
                    self._changed.notify_all()

    def run(self, batches: queue.SimpleQueue[_Batch[Any]], workers: int) -> None:
        """Hand the batch to ``workers`` workers through ``batches`` and wait for every
        part (in the caller); raise the first exception a part raised.

        Interrupted (KeyboardInterrupt), the parts not yet started are dropped and the
        running ones are waited for before the interrupt goes on.
        """
        try:
            for _ in range(workers):
                batches.put(self)
            with self._changed:
                while self._running or (self._error is None and self._next < len(self._parts)):
                    self._changed.wait()
        except BaseException:
            with self._changed:
                self._next = len(self._parts)
                while self._running:
                    self._changed.wait()
            raise
        if self._error is not None:
            raise self._error


class _Workers:
    """``size`` daemon threads serving batches in the order they come."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._batches: queue.SimpleQueue[_Batch[Any]] = queue.SimpleQueue()
        for i in range(size):
            threading.Thread(target=self._serve, name=f"flexq-numpy_{i}", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._batches.get().serve()

    def run(self, work: Callable[[Sequence[T]], None], parts: list[Sequence[T]]) -> None:
        """Run ``work`` on every part on up to ``size`` workers; return when all are done."""
        _Batch(work, parts).run(self._batches, min(self.size, len(parts)))


def _workers(size: int) -> _Workers:
    global _pool
    with _lock:
        if _pool is None or _pool.size != size:  # first use, or FLEXQ_THREADS changed
            # A pool left behind idles on its empty queue (daemon threads cost nothing at exit).
            _pool = _Workers(size)
        return _pool


def _forget_pool() -> None:
    # A forked child (a DataLoader worker, say) inherits the pool object but not
    # its threads: work handed to it would wait forever. Start afresh instead.
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def run_on_threads(work: Callable[[Sequence[T]], None], items: Sequence[T], most: int) -> None:
    """Call ``work`` on consecutive runs of ``items``, at most ``most`` items each,
    on the worker threads (inline when one thread or one run would do).

    Runs are at most ``most`` long so that a thread on an idle core takes over
    runs a thread on a busy core has not started (cores are often shared).
    Exceptions from ``work`` propagate to the caller once no run is running.
    """
    size = thread_count()
    threads = min(len(items), size)
    if threads < 2:
        work(items)
        return
    per = max(1, min(-(-len(items) // threads), most))
    _workers(size).run(work, [items[i : i + per] for i in range(0, len(items), per)])
