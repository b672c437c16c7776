"""Dequantize throughput of the ct-int format next to a numpy memcpy of the same output bytes.

Run ``python bench_ct_int.py`` (or ``nox -s bench``). Builds 4096 x 4096
linears in temporary checkpoints -- W4A16 group 128 symmetric and asymmetric
(pack-quantized), W8A16 group 128 (pack-quantized) and W8A8 per channel
(int-quantized) -- reads their components once, then times the CPU dequantize
to float32 and ``np.copyto`` of an equally large float32 array, both into
outputs written before, alternating, median of 5.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

from flexq import TargetSlice, compose
from flexq.testing import dequantizer
from flexq_ct_int import WeightScheme, save_ct_int_checkpoint

OUT_FEATURES = 4096
IN_FEATURES = 4096
ROUNDS = 5
SCHEMES = {
    "w4a16": WeightScheme(bits=4, strategy="group", group_size=128),
    "w4a16_asym": WeightScheme(bits=4, strategy="group", group_size=128, symmetric=False),
    "w8a16": WeightScheme(bits=8, strategy="group", group_size=128),
    "w8a8": WeightScheme(fmt="int-quantized", bits=8, strategy="channel"),
}


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure() -> dict[str, float]:
    """GB/s of float32 output: dequantize per scheme and np.copyto of the same bytes."""
    rng = np.random.default_rng(0)
    out_bytes = OUT_FEATURES * IN_FEATURES * 4
    src = np.ones((OUT_FEATURES, IN_FEATURES), dtype=np.float32)
    dst = np.ones_like(src)
    w = rng.standard_normal((OUT_FEATURES, IN_FEATURES)).astype(np.float32) * 0.02
    runs: dict[str, Callable[[], object]] = {"memcpy": lambda: np.copyto(dst, src)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, scheme in SCHEMES.items():
            path = save_ct_int_checkpoint(f"{tmp}/{name}", {"fc.weight": w}, scheme)
            ct = compose(path, ["ct-int"])
            plan = ct.plan("fc.weight", TargetSlice.whole((OUT_FEATURES, IN_FEATURES), "float32"))
            sources = ct.read_sources(plan)
            runs[name] = dequantizer(ct, "fc.weight", plan, sources)
            runs[f"{name}_bf16"] = dequantizer(ct, "fc.weight", plan, sources, "bfloat16")
        times: dict[str, list[float]] = {name: [] for name in runs}
        for fn in runs.values():  # warm-up: page faults and allocator growth
            fn()
        for _ in range(ROUNDS):
            for name, fn in runs.items():
                times[name].append(_seconds(fn))
    figures = {
        f"ct_int_{name}_gbps": out_bytes / statistics.median(t) / 1e9
        for name, t in times.items()
        if name != "memcpy"
    }
    figures["memcpy_gbps"] = out_bytes / statistics.median(times["memcpy"]) / 1e9
    return figures


def main() -> None:
    """Print the figures of :func:`measure`."""
    figures = measure()
    print(f"ct-int dequantize {OUT_FEATURES}x{IN_FEATURES} -> float32 (median of {ROUNDS}):")
    for name, value in figures.items():
        print(f"  {name:24s} {value:7.2f} GB/s")


if __name__ == "__main__":
    main()
