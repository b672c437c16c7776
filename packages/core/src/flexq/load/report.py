"""The value types of one load: the caller's options and the report of what it did."""

from __future__ import annotations

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
    """

    engine: str
    pieces: int
    batches: int
    bytes_read: int
    planned_bytes: int
    casts: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class LoadOptions:
    """The caller's settings for one load."""

    aoa_config: dict[str, Any] | None
    max_inflight_bytes: int
    atomic: bool
    process_group: Any
    offload: bool
    paddle_options: dict[str, Any]
