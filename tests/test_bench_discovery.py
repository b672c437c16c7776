"""The discovery bench's goals, and pydantic's share of the FP8 figure: the difference of
the two FP8 cases of the same run (its page: tests/test_bench_pages.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import discovery  # noqa: E402


def case(total: float) -> dict[str, Any]:
    return {
        "total_s": total,
        "discovery_s": total / 2,
        "first_compose_s": total / 2,
        "total_range_s": [total, total],
        "formats": 9,
        "pydantic_imported": True,
        "wall_with_s": 1.0,
        "wall_baseline_s": 1.0,
        "wall_difference_s": 0.0,
    }


def test_pydantic_share_is_the_difference_of_the_two_fp8_cases() -> None:
    f = {"cases": {"fp8": case(0.070), "plain": case(0.013), "fp8-pydantic-imported": case(0.014)}}
    (text,) = [line for line in discovery._pydantic_share(f) if line]
    assert "Of the FP8 checkpoint's 70.0 ms, 56.0 ms is importing pydantic" in text
    assert "flexq's own part is 14.0 ms" in text
    met = {k: g["met"] for k, g in discovery.goals(f).items()}
    assert met == {
        "discovery_fp8": False,
        "discovery_plain": True,
        "discovery_fp8-pydantic-imported": True,
    }
    del f["cases"]["fp8-pydantic-imported"]  # an older results file: no share line
    assert discovery._pydantic_share(f) == []
