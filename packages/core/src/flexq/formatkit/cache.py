"""Remember a format's analysis of a checkpoint for as long as the checkpoint object lives.

For formats: the core asks per-tensor hooks many times per load, so a format
analyses a checkpoint once (``@cached_per_checkpoint def analyze(ckpt) -> ...``) and
every later hook reads the remembered result.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from flexq.io.checkpoint import Checkpoint

T = TypeVar("T")


def cached_per_checkpoint(analyze: Callable[[Checkpoint], T]) -> Callable[[Checkpoint], T]:
    """Memoize ``analyze(ckpt)`` per Checkpoint object (None results included).

    An exception is not remembered: the next call raises it again. Entries go
    when the checkpoint object is garbage collected.
    """
    memo: weakref.WeakKeyDictionary[Checkpoint, T] = weakref.WeakKeyDictionary()

    @functools.wraps(analyze)
    def remembered(ckpt: Checkpoint) -> T:
        if ckpt in memo:
            return memo[ckpt]
        # Outside any ``except``: an analysis error must not chain a KeyError.
        result = memo[ckpt] = analyze(ckpt)
        return result

    return remembered
