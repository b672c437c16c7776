"""Alternating timing rounds: every contender runs once per round, medians over rounds.

Alternating means drift on a shared machine (another job, thermal limits)
hits every contender alike, so ratios of medians from one run are fair.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping

#: A contender: ``prepare()`` (untimed: fresh targets) returns the timed call.
Contender = Callable[[], Callable[[], object]]


def alternate(contenders: Mapping[str, Contender], rounds: int) -> dict[str, list[float]]:
    """Seconds per round for each contender, after one untimed warm-up round each.

    The order of contenders rotates every round so none always runs first.
    """
    names = list(contenders)
    for name in names:
        contenders[name]()()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            call = contenders[name]()
            gc.collect()
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
            del call
    return times


def median(values: list[float]) -> float:
    """The median of ``values``."""
    return statistics.median(values)
