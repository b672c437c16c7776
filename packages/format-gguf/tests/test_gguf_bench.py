"""The benchmark script runs and reports the figures `nox -s bench` reads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from flexq_format_gguf.decode import DECODERS

BENCH = Path(__file__).parents[1] / "bench" / "bench_gguf.py"


def test_measure_reports_every_block_type_and_memcpy_throughput() -> None:
    spec = importlib.util.spec_from_file_location("bench_gguf", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    figures = module.measure(rows=4, cols=256, rounds=1)
    assert set(figures) == {f"gguf_{n}_gbps" for n in DECODERS} | {"memcpy_gbps"}
    assert all(v > 0 for v in figures.values())
