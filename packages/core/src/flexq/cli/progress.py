"""``flexq convert``'s progress, in bytes, for a person at a terminal or a log file.

Two counts move: bytes decoded (as each tensor is dequantized) and bytes written (as
each shard file grows on disk, so nothing freezes at 100% while a large shard is
written). On a terminal: a rich bar per count. Not on a terminal (CI, nohup, a pipe):
a plain line on stderr at every :data:`STEP` percent of the work, once the convert has
run :data:`QUIET_SECONDS` (a small convert prints no progress at all).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

from rich.filesize import decimal

if TYPE_CHECKING:
    from collections.abc import Callable

#: A plain progress line every STEP percent of the work (decoding and writing together).
STEP = 10
#: No plain line before the convert has run this long.
QUIET_SECONDS = 2.0


class PlainProgress:
    """Plain ``flexq: convert: 40% (decoded 8.2 MB, written 1.6 MB of 12.3 MB)`` lines.

    :param quiet_seconds: no line before this much time has passed since :meth:`start`.
    """

    def __init__(self, stream: TextIO, quiet_seconds: float = QUIET_SECONDS) -> None:
        self._stream = stream
        self._quiet_until = quiet_seconds  # made absolute by start()
        self._lock = threading.Lock()  # `wrote` comes from the file watcher's thread
        self._total = self._decoded = self._written = 0
        self._shown = 0

    def start(self, total_bytes: int, tensors: int) -> None:
        self._total = total_bytes
        self._quiet_until += time.monotonic()

    def advance(self, key: str, nbytes: int) -> None:
        with self._lock:
            self._decoded += nbytes
            self._show()

    def wrote(self, nbytes: int) -> None:
        with self._lock:
            self._written += nbytes
            self._show()

    def _show(self) -> None:
        done = 100 * (self._decoded + self._written) // max(2 * self._total, 1)
        if done < self._shown + STEP or time.monotonic() < self._quiet_until:
            return
        self._shown = done - done % STEP
        print(
            f"flexq: convert: {self._shown}% (decoded {decimal(self._decoded)}, "
            f"written {decimal(self._written)} of {decimal(self._total)})",
            file=self._stream,
            flush=True,
        )

    def stop(self) -> None:
        pass


class BarProgress:
    """Two rich bars on stderr, decoded and written, with bytes, rate and time left."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            "{task.description}",
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self._decoded = self._written = self._progress.add_task("", visible=False)

    def start(self, total_bytes: int, tensors: int) -> None:
        self._decoded = self._progress.add_task(f"decoded ({tensors} tensors)", total=total_bytes)
        self._written = self._progress.add_task("written", total=total_bytes)
        self._progress.start()

    def advance(self, key: str, nbytes: int) -> None:
        self._progress.advance(self._decoded, nbytes)

    def wrote(self, nbytes: int) -> None:
        self._progress.advance(self._written, nbytes)

    def stop(self) -> None:
        self._progress.stop()


def convert_progress(on_done: Callable[[], None], stream: TextIO | None = None) -> ConvertBar:
    """The progress ``flexq convert`` shows: bars on a terminal, plain lines otherwise;
    ``on_done`` runs once DST is complete."""
    stream = sys.stderr if stream is None else stream
    shown = BarProgress() if stream.isatty() else PlainProgress(stream)
    return ConvertBar(shown, on_done)


class ConvertBar:
    """A :class:`flexq.cli.convert.ConvertProgress` that shows bytes as they move."""

    def __init__(self, shown: PlainProgress | BarProgress, on_done: Callable[[], None]) -> None:
        self._shown = shown
        self._on_done = on_done

    def start(self, total_bytes: int, tensors: int) -> None:
        self._shown.start(total_bytes, tensors)

    def advance(self, key: str, nbytes: int) -> None:
        self._shown.advance(key, nbytes)

    def wrote(self, nbytes: int) -> None:
        self._shown.wrote(nbytes)

    def done(self) -> None:
        self._on_done()

    def stop(self) -> None:
        self._shown.stop()
