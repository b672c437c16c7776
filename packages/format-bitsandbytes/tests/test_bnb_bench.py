"""The benchmark script runs and reports the figures `nox -s bench` reads."""

from __future__ import annotations

from pathlib import Path

from flexq.testing import load_script

BENCH = Path(__file__).parents[1] / "bench" / "bench_bitsandbytes.py"


def test_measure_reports_dequantize_and_memcpy_throughput() -> None:
    figures = load_script(BENCH).measure(rows=64, cols=128, rounds=1)
    assert set(figures) == {"nf4_gbps", "nf4_bf16_gbps", "int8_gbps", "memcpy_gbps"}
    assert all(v > 0 for v in figures.values())
