"""flexq.testing.throughput, the timing loop of the format packages' benches: the figures
it names and the outputs its runs write (the decoded values, not the timings)."""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING

import numpy as np
import pytest

import flexq
from flexq.testing import same_bits
from flexq.testing.throughput import Case, measure_cases, measure_checkpoints, report

if TYPE_CHECKING:
    from .conftest import ScaledFormat


def scaled_case(scale: float) -> Case:
    q = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    s = np.array(scale, dtype=np.float32)
    return Case({"a.q": flexq.RawTensor.of(q), "a.s": flexq.RawTensor.of(s)}, "a")


def test_measure_cases_names_a_figure_per_run_and_the_memcpy_baseline(
    scaled_format: ScaledFormat,
) -> None:
    cases = {"x": scaled_case(0.5), "y": Case(scaled_case(2.0).tensors, "a", bfloat16=False)}
    figures = measure_cases("scaled", cases, rounds=2)
    assert set(figures) == {"x_gbps", "x_bf16_gbps", "y_gbps", "memcpy_gbps"}
    assert all(v > 0 for v in figures.values())
    lines = report("scaled", figures).splitlines()
    assert lines[0] == "scaled:"
    assert [ln.split()[0] for ln in lines[1:]] == list(figures)


def test_the_runs_decode_into_outputs_shared_by_shape(scaled_format: ScaledFormat) -> None:
    """The runs of one shape write one output (the last run's values stay in it)."""
    from flexq.testing.throughput import Outputs, dequantize_runs

    outputs: Outputs = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = flexq.save_checkpoint(tmp, scaled_case(0.5).tensors)
        ct = flexq.compose(path, ["scaled"])
        runs = dequantize_runs(ct, "a", "x", outputs=outputs)
        ct.checkpoint.close()
    runs["x"]()
    into, _, into16 = outputs[(3, 4)]
    want = np.arange(-6, 6, dtype=np.float32).reshape(3, 4) * 0.5
    same_bits(into, want)
    runs["x_bf16"]()
    assert into16.dtype == np.uint16
    same_bits(into16, (want.view(np.uint32) >> 16).astype(np.uint16))  # halves: exact in bf16


def test_cases_of_different_sizes_are_refused(scaled_format: ScaledFormat) -> None:
    small = scaled_case(1.0)
    q = np.zeros((2, 2), np.int8)
    other = Case({"a.q": flexq.RawTensor.of(q), "a.s": small.tensors["a.s"]}, "a")
    with pytest.raises(ValueError, match="different sizes"):
        measure_cases("scaled", {"x": small, "y": other}, rounds=1)


def test_measure_checkpoints_times_checkpoints_a_bench_wrote(scaled_format: ScaledFormat) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = flexq.save_checkpoint(f"{tmp}/x", scaled_case(0.5).tensors)
        figures = measure_checkpoints("scaled", {"x": (path, "a")}, rounds=1)
    assert set(figures) == {"x_gbps", "x_bf16_gbps", "memcpy_gbps"}
    assert all(v > 0 for v in figures.values())
