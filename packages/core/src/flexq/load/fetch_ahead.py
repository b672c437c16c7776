"""The next piece's boxes read on a thread of their own while this piece decodes.

For :class:`flexq.load.sources.DirectSource`. The read-ahead window
(:mod:`flexq.load.readahead`) has the kernel bring the next pieces' pages into its page
cache; the boxes still have to be copied into the process (``preadv``), and on a cold
cache that copy waits for the disk. Done on the load's own thread, that copy sits
between two decodes: the cores idle while it runs, the disk while they decode. Here it
runs beside the decode: the copy (or the wait for the disk) of piece k+1 happens while
the worker threads decode piece k, and ``preadv`` holds no GIL, so the two overlap.

Bounded: the engine asks for one piece ahead, and only a piece whose boxes are at most
:data:`FETCH_AHEAD_BYTES`, so memory above the targets grows by at most that. Only where
a core is spare (:func:`flexq.numerics.threads.spare_cores`): with every core decoding, the
copy takes its cycles from the decode, and a 2-core machine with 2 workers loaded no
faster with it (a spare core, e.g. 1 worker there, took 7% off a warm 1 GiB load).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

#: Largest source bytes of a piece read ahead into the process (a bigger piece is read
#: when its decode asks for it, as before): a 64 MiB float32 output's FP8 codes are 16 MiB.
FETCH_AHEAD_BYTES = 64 << 20


class Fetched:
    """One piece's boxes being read on a daemon thread (a load that stops part-way never
    waits for it); :meth:`result` waits for them."""

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self._boxes: dict[str, Any] = {}
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(read,), name="flexq-fetch-ahead", daemon=True
        )
        self._thread.start()

    def _run(self, read: Callable[[], dict[str, Any]]) -> None:
        try:
            self._boxes = read()
        except BaseException as exc:  # handed to the load's thread by result()
            self._error = exc

    def result(self) -> dict[str, Any]:
        """The boxes, once read.

        :raises: what the read raised (a file changed or cut since compose: its
            :class:`~flexq.errors.CheckpointError`), on the load's own thread.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._boxes
