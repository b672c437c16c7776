"""A callback run every few tenths of a second while a block of work runs.

For flexq's progress displays (convert's bytes-written bar, API loads' bytes-read
bar): they watch the work from beside it, so the work itself does nothing extra
per tensor.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@contextmanager
def polled(tick: Callable[[], None], seconds: float, name: str) -> Iterator[None]:
    """Call ``tick`` every ``seconds`` on a daemon thread ``name`` while the block runs;
    the thread is stopped and joined when the block ends, however it ends (daemon: an
    interrupted process never waits for it)."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(seconds):
            tick()

    watcher = threading.Thread(target=watch, name=name, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
