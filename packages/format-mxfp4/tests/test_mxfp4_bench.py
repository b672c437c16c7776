"""The benchmark script runs and reports the figures `nox -s bench` reads."""

from __future__ import annotations

from pathlib import Path

from flexq.testing import load_script

BENCH = Path(__file__).parents[1] / "bench" / "bench_mxfp4.py"


def test_measure_reports_dequantize_and_memcpy_throughput() -> None:
    figures = load_script(BENCH).measure(experts=1, rows=64, cols=64, rounds=1)
    assert set(figures) == {"mxfp4_gbps", "mxfp4_bf16_gbps", "memcpy_gbps"}
    assert all(v > 0 for v in figures.values())
