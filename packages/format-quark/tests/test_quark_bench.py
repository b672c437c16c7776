"""The benchmark script runs and reports the figures `nox -s bench` reads."""

from __future__ import annotations

from pathlib import Path

from flexq.testing import load_script

BENCH = Path(__file__).parents[1] / "bench" / "bench_quark.py"


def test_measure_reports_every_scheme_float32_and_bfloat16_and_memcpy() -> None:
    bench = load_script(BENCH)
    # tiny: the figures, not the speed
    for name, value in (("OUT_FEATURES", 256), ("IN_FEATURES", 256), ("ROUNDS", 1)):
        setattr(bench, name, value)
    figures = bench.measure()
    cases = {"quark_fp8_channel", "quark_int4", "quark_uint4", "quark_mxfp4"}
    want = {f"{c}{s}_gbps" for c in cases for s in ("", "_bf16")} | {"memcpy_gbps"}
    assert set(figures) == want
    assert all(v > 0 for v in figures.values())
