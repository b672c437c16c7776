"""The benchmark script runs and reports the figures `nox -s bench` reads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).parents[1] / "bench" / "bench_bitsandbytes.py"


def test_measure_reports_dequantize_and_memcpy_throughput() -> None:
    spec = importlib.util.spec_from_file_location("bench_bitsandbytes", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    figures = module.measure(rows=64, cols=128, rounds=1)
    assert set(figures) == {"nf4_gbps", "nf4_bf16_gbps", "int8_gbps", "memcpy_gbps"}
    assert all(v > 0 for v in figures.values())
