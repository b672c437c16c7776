"""The physical-limit bench's bars are the issue's (cold <= 1.3x max(read, memcpy), warm
<= 1.2x memcpy, 200 MB <= 0.15x DCP); its page: tests/test_bench_pages.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import physical  # noqa: E402


def figures(**medians: float) -> dict[str, Any]:
    """Results with one run per series, of the given seconds (series names with _ for -)."""
    series = {}
    for name, seconds in medians.items():
        label = name.replace("__", " ").replace("_", "-")
        series[label] = {"runs": [{"seconds": seconds}], "seconds": {"median": seconds}}
    return {"rounds": 1, "checkpoint_bytes": 1, "targets_bytes": 1, "series": series}


def test_the_bars_are_met_at_the_limits_and_missed_past_them() -> None:
    f = figures(
        cold__read_buffered=0.2,
        warm__memcpy=0.1,
        cold__flexq=0.26,  # 1.3 x max(0.2, 0.1)
        warm__flexq=0.12,  # 1.2 x 0.1
        x1__warm__flexq=0.15,
        x1__warm__dcp=1.0,
    )
    assert physical.limit(f) == 0.2
    assert {k: g["met"] for k, g in physical.goals(f).items()} == {
        "physical_cold": True,
        "physical_warm": True,
        "physical_dcp": True,
    }
    f["series"]["cold flexq"]["seconds"]["median"] = 0.27
    f["series"]["warm flexq"]["seconds"]["median"] = 0.13
    f["series"]["x1 warm flexq"]["seconds"]["median"] = 0.16
    assert not any(g["met"] for g in physical.goals(f).values())
    # memcpy above the read time is the limit instead
    f["series"]["warm memcpy"]["seconds"]["median"] = 0.5
    assert physical.limit(f) == 0.5
