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

The window's advice is given on a thread of its own (:class:`AdviceThread`): on a cold
cache ``POSIX_FADV_WILLNEED`` returns only once the kernel has queued the reads, which
took a fifth of the disk's read time of a 1 GiB block-FP8 load here (50-57 ms of the
load's thread, measured), time it would otherwise not decode. The call holds no GIL.
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

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
    """``source``'s prefetches made in order on a thread of their own (started on the
    first), so the load's thread never waits for the kernel to queue its reads.
    :meth:`close` it when the load ends (``contextlib.closing``): advice not yet given is
    dropped, and the call being made ends before the files can close."""

    def __init__(self, source: Prefetcher) -> None:
        self._source = source
        self._advice: queue.SimpleQueue[tuple[int, Sequence[str] | None] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._closed = False

    def prefetch(self, index: int, keys: Sequence[str] | None = None) -> None:
        """Queue piece ``index``'s prefetch (of ``keys``, or all its boxes)."""
        if self._closed:
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
            if self._closed:
                continue
            try:
                self._source.prefetch(*item)
            except Exception:
                # Only a hint: the read of the same box fails on the load's thread with
                # the file and tensor named (a file cut or changed since compose).
                continue
