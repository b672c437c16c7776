"""Disk-level accounting of reads: the page floor and what the kernel says it read.

For :class:`flexq.io.checkpoint.Checkpoint` (which records the byte ranges it
reads) and :class:`flexq.load.report.LoadReport` (which reports both figures),
and for benchmarks comparing them. The *page floor* of a set of byte ranges is
the size of the set of 4 KiB file pages they touch: no reader can fetch less
from disk. The *measured* figure is the ``read_bytes`` counter of
``/proc/self/io`` (bytes this process caused to be fetched from storage; pages
already in the page cache do not count), where the platform has it.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

#: The unit the kernel reads files in (4 KiB on every platform flexq targets).
PAGE = 4096
_PROC_IO = Path("/proc/self/io")


def page_span(start: int, stop: int) -> tuple[int, int]:
    """The pages [first, last + 1) that the bytes [start, stop) touch (stop > start)."""
    return start // PAGE, (stop - 1) // PAGE + 1


class PageSet:
    """The pages of each file that reads touched, kept as ranges and merged when asked."""

    def __init__(self) -> None:
        self._ranges: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)

    def add(self, file: str, start: int, stop: int) -> None:
        """Record that bytes [start, stop) of ``file`` were read."""
        if stop > start:
            self._ranges[file].append(page_span(start, stop))

    def bytes(self) -> int:
        """The page floor: bytes of the distinct pages recorded, over every file."""
        total = 0
        for file, ranges in self._ranges.items():
            merged: list[tuple[int, int]] = []
            for lo, hi in sorted(ranges):
                if merged and lo <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
                else:
                    merged.append((lo, hi))
            self._ranges[file] = merged  # keep the merged form: later calls start from it
            total += sum(hi - lo for lo, hi in merged)
        return total * PAGE


def disk_read_bytes() -> int | None:
    """This process's ``read_bytes`` from ``/proc/self/io``; None where there is none."""
    try:
        text = _PROC_IO.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == "read_bytes":
            return int(value)
    return None
