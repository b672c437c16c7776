"""Reading ahead of the decode: the next pieces' file pages fetched while one decodes.

For :func:`flexq.load.write.fill`. Read piece by piece, a cold load alternates: the
disk works while piece k is read (the cores wait), the cores while it is decoded (the
disk waits), so it takes the read time plus the decode time. Before a piece is read,
the pieces after it, up to :data:`READ_AHEAD_BYTES` of source bytes with the piece
itself (and at least the next piece), are handed to the source's ``prefetch``: for the
direct source ``POSIX_FADV_WILLNEED`` over exactly the page spans their reads will
read, so the kernel fetches them, many requests at once, while piece k decodes, and
the reads then copy from the page cache. The window lives in the kernel's page cache,
never in the process: memory above the targets stays near one piece.

The window's advice is given where it costs least (:class:`AdviceThread`). On a cold
cache ``POSIX_FADV_WILLNEED`` returns only once the kernel has queued the reads (2.8-4.0 ms
a 16 MiB piece of a 1 GiB block-FP8 load here; 50-57 ms of the load's thread in all, a
fifth of the disk's read time), time the load would otherwise decode: that advice goes to
a thread of its own, where the call holds no GIL. With the pages cached the same call takes
0.2-0.45 ms, less than handing it to another thread costs a fresh process (warm loads,
alternating fresh processes: 333 ms with every call on the thread, 295 ms with every call
on the load's thread): advice is given on the load's thread until one call shows the
pages are on disk.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

#: An advice call on the load's thread that takes this long found its pages on disk (the
#: kernel queued their reads before it returned): that call's successors go to the adviser
#: thread. Between the two cases measured per piece above, well above a cached call's
#: time on a loaded machine.
COLD_CALL_S = 1e-3
#: Source bytes queued ahead of the reads, the piece being read included: enough to keep
#: a disk's queue full while a piece decodes (NVMe and virtio disks reach their rate with
#: a few MiB in flight), small enough that nothing queued is evicted before it is read.
READ_AHEAD_BYTES = 64 << 20


class Prefetcher(Protocol):
    """What the window asks: a source (:meth:`flexq.load.sources.Source.prefetch`) or an
    :class:`AdviceThread` over one."""

    def prefetch(self, index: int, keys: Sequence[str] | None = None) -> None: ...


class ReadAhead:
    """The read-ahead window of one load over ``source``'s pieces, in the order they
    are read; ``sizes[i]`` is piece ``i``'s source bytes."""

    def __init__(self, source: Prefetcher, sizes: Sequence[int], budget: int | None = None) -> None:
        self._source = source
        self._sizes = sizes
        self._budget = READ_AHEAD_BYTES if budget is None else budget
        #: pieces [first, queued) are queued and not yet read; ``ahead`` their bytes.
        self._first = 0
        self._queued = 0
        self._ahead = 0

    def before(self, index: int) -> None:
        """Piece ``index`` is about to be read: the pieces before it are done; queue it
        and the pieces after it that fit the window."""
        while self._first < min(index, self._queued):
            self._ahead -= self._sizes[self._first]
            self._first += 1
        if self._queued <= index:  # nothing queued is still ahead (a skipped stretch)
            self._first = self._queued = index
            self._ahead = 0
        while self._queued < len(self._sizes) and (
            self._queued <= index + 1 or self._ahead + self._sizes[self._queued] <= self._budget
        ):
            self._source.prefetch(self._queued)
            self._ahead += self._sizes[self._queued]
            self._queued += 1


class AdviceThread:
    """``source``'s prefetches made in order: on the caller's (the load's) thread while
    they are quick (the pages cached), then, from the first that takes
    :data:`COLD_CALL_S` or more (the kernel queued reads from disk), on a thread of their
    own, so the load's thread no longer waits for the kernel to queue its reads.
    :meth:`close` it when the load ends (``contextlib.closing``): advice not yet given is
    dropped, and the call being made ends before the files can close."""

    def __init__(self, source: Prefetcher) -> None:
        self._source = source
        self._advice: queue.SimpleQueue[tuple[int, Sequence[str] | None] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._cold = False  # a call found its pages on disk: advice goes to the thread
        self._closed = False

    def prefetch(self, index: int, keys: Sequence[str] | None = None) -> None:
        """Give piece ``index``'s prefetch (of ``keys``, or all its boxes) now, or queue it
        for the adviser thread once the cache has shown itself cold."""
        if self._closed:
            return
        if not self._cold:
            start = time.perf_counter()
            self._give(index, keys)
            self._cold = time.perf_counter() - start >= COLD_CALL_S
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._give_advice, name="flexq-read-ahead", daemon=True
            )
            self._thread.start()
        self._advice.put((index, keys))

    def close(self) -> None:
        """The load is over: drop the advice not yet given, wait for the call being made."""
        self._closed = True
        if self._thread is not None:
            self._advice.put(None)
            self._thread.join()
            self._thread = None

    def _give_advice(self) -> None:
        while (item := self._advice.get()) is not None:
            if not self._closed:
                self._give(*item)

    def _give(self, index: int, keys: Sequence[str] | None) -> None:
        try:
            self._source.prefetch(index, keys)
        except Exception:
            # Only a hint: the read of the same box fails on the load's thread with the
            # file and tensor named (a file cut or changed since compose).
            return
