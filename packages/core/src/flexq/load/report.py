"""The value types of one load: the caller's options and the report of what it did."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoadReport:
    """What one :func:`flexq.load_state_dict` call did on this rank.

    :ivar bytes_read: bytes of source boxes this rank read (direct engine: from
        the files itself; flexcheckpoint: the boxes Paddle's loader delivered).
    :ivar planned_bytes: bytes of the source boxes this rank's read plans name.
    :ivar casts: (target key, checkpoint dtype, target dtype) of every plain
        tensor cast to its target's dtype.
    :ivar pages_read_bytes: the page floor of this rank's reads (direct engine):
        bytes of the distinct 4 KiB file pages the byte ranges it read touch, which
        is what a cold page cache must fetch from disk at least. None where Paddle's
        loader did the reads (flexcheckpoint, native).
    :ivar disk_read_bytes: bytes the kernel fetched from storage for this process
        during the load (``read_bytes`` of ``/proc/self/io``; pages already cached
        do not count, other threads' reads do). None where there is no such counter
        or the engine does not measure it (native).
    """

    engine: str
    pieces: int
    batches: int
    bytes_read: int
    planned_bytes: int
    casts: tuple[tuple[str, str, str], ...] = ()
    pages_read_bytes: int | None = None
    disk_read_bytes: int | None = None


@dataclass(frozen=True)
class LoadOptions:
    """The caller's settings for one load.

    :ivar before_write: run once every check of the ordinary targets has passed and
        before their first write (the kept targets' data checks, :mod:`flexq.load.kept`).
    """

    aoa_config: dict[str, Any] | None
    max_inflight_bytes: int
    atomic: bool
    process_group: Any
    offload: bool
    paddle_options: dict[str, Any]
    before_write: Callable[[], None] | None = None
