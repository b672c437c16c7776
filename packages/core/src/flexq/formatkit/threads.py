"""The worker threads flexq's bulk numpy work shares (lookups, bfloat16 rounding).

numpy releases the GIL inside its array loops, so a few threads each running
numpy calls over their own part of an array use every core a load may run on.
One pool for the process: decoding and rounding never run nested. The number
of threads is ``FLEXQ_THREADS`` if set, else the cores this process may run on,
at most 4 (several ranks usually share a node).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from flexq.errors import FlexqError

T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_lock = threading.Lock()


def thread_count() -> int:
    """Worker threads: ``FLEXQ_THREADS``, else the cores this process may run on, at most 4.

    :raises FlexqError: when ``FLEXQ_THREADS`` is not a positive integer.
    """
    value = os.environ.get("FLEXQ_THREADS", "").strip()
    if not value:
        return min(4, len(os.sched_getaffinity(0)))
    if not value.isdigit() or int(value) < 1:
        raise FlexqError(f"FLEXQ_THREADS={value!r}: expected a positive whole number of threads")
    return int(value)


def _workers(size: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != size:  # first use, or FLEXQ_THREADS changed
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool, _pool_size = ThreadPoolExecutor(size, "flexq-numpy"), size
        return _pool


def _forget_pool() -> None:
    # A forked child (a DataLoader worker, say) inherits the pool object but not
    # its threads: work handed to it would wait forever. Start afresh instead.
    global _pool, _pool_size, _lock
    _pool, _pool_size, _lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def run_parts(work: Callable[[Sequence[T]], None], items: Sequence[T], most: int) -> None:
    """Call ``work`` on consecutive runs of ``items``, at most ``most`` items each,
    on the worker threads (inline when one thread or one run would do).

    Runs are at most ``most`` long so that a thread on an idle core takes over
    runs a thread on a busy core has not started (cores are often shared).
    Exceptions from ``work`` propagate to the caller.
    """
    size = thread_count()
    threads = min(len(items), size)
    if threads < 2:
        work(items)
        return
    per = max(1, min(-(-len(items) // threads), most))
    list(_workers(size).map(work, [items[i : i + per] for i in range(0, len(items), per)]))
