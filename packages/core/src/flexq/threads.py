"""The worker threads flexq's bulk numpy work shares (lookups, bfloat16 rounding).

numpy releases the GIL inside its array loops, so a few threads each running
numpy calls over their own part of an array use every core a load may run on.
One pool for the process: decoding and rounding never run nested.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def thread_count() -> int:
    """Worker threads: the cores this process may run on, at most 4."""
    return min(4, len(os.sched_getaffinity(0)))


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(thread_count(), "flexq-numpy")
        return _pool


def run_parts(work: Callable[[Sequence[T]], None], items: Sequence[T], most: int) -> None:
    """Call ``work`` on consecutive runs of ``items``, at most ``most`` items each,
    on the worker threads (inline when one thread or one run would do).

    Runs are at most ``most`` long so that a thread on an idle core takes over
    runs a thread on a busy core has not started (this machine class is shared).
    Exceptions from ``work`` propagate to the caller.
    """
    threads = min(len(items), thread_count())
    if threads < 2:
        work(items)
        return
    per = max(1, min(-(-len(items) // threads), most))
    list(_workers().map(work, [items[i : i + per] for i in range(0, len(items), per)]))
