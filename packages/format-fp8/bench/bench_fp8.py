"""Dequantize throughput of the fp8 format next to a memcpy of the same output bytes.

Run ``python bench/bench_fp8.py`` (or ``nox -s bench``, which calls
:func:`measure`). Times the CPU (numpy) path of the one dequantize definition
on in-memory sources -- no file I/O -- for a DeepSeek-V3-sized block-scaled
projection, into an output array written before (as a model's parameters are),
and ``np.copyto`` of the same float32 output bytes into such an array in the
same run; ``<layout>_bf16`` also rounds it to bfloat16, as a load into bfloat16
targets does (GB/s of float32-sized output).
Rounds alternate between the two and the median of each is reported.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from flexq.formatkit.rounding import round_numpy
from flexq_fp8.decode import dequantize
from flexq_fp8.layout import Fp8Layout

#: A DeepSeek-V3 MLA-sized projection: [out, in] with 128x128 F32 block scales.
SHAPE = (2048, 7168)
ROUNDS = 9


def _cases() -> dict[str, tuple[Fp8Layout, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    out, inp = SHAPE
    codes = rng.integers(0, 0x7E, size=SHAPE, dtype=np.uint8)
    block_grid = (-(-out // 128), -(-inp // 128))
    return {
        "block128_f32": (
            Fp8Layout("w", "s", "F32", SHAPE, (128, 128), block_grid, "float32"),
            codes,
            rng.uniform(1e-4, 1e-2, block_grid).astype(np.float32),
        ),
        "channel_f32": (
            Fp8Layout("w", "s", "F32", SHAPE, (1, inp), (out, 1), "float32"),
            codes,
            rng.uniform(1e-4, 1e-2, (out, 1)).astype(np.float32),
        ),
        "tensor_f32": (
            Fp8Layout("w", "s", "F32", SHAPE, SHAPE, (), "float32"),
            codes,
            np.array(3e-3, np.float32),
        ),
    }


def _median_seconds(fn: Callable[[], object], other: Callable[[], object]) -> tuple[float, float]:
    """Median wall time of ``fn`` and ``other`` over alternating rounds."""
    fn()
    other()  # warm-up: page in buffers, build tables
    a, b = [], []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        other()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return statistics.median(a), statistics.median(b)


def measure() -> dict[str, float]:
    """GB/s of float32 output for each layout and for a memcpy of the same bytes."""
    figures: dict[str, float] = {}
    out_bytes = SHAPE[0] * SHAPE[1] * 4
    src = np.ones(SHAPE, np.float32)
    dst = np.ones(SHAPE, np.float32)
    into = np.ones(SHAPE, np.float32)
    into16 = np.ones(SHAPE, np.uint16)
    copy_times = []
    for name, (layout, codes, scale) in _cases().items():

        def run(
            layout: Fp8Layout = layout, codes: np.ndarray = codes, scale: np.ndarray = scale
        ) -> object:
            return dequantize(layout, codes, scale, (0, 0), SHAPE, out=into)

        def run_bf16(run: Callable[[], object] = run) -> object:
            # As the core does for a bfloat16 host target: decode into a float32 work
            # array, round it once into the target.
            run()
            return round_numpy(into, "bfloat16", into16)

        t_deq, t_copy = _median_seconds(run, lambda: np.copyto(dst, src))
        figures[f"fp8_{name}_gbps"] = out_bytes / t_deq / 1e9
        t_bf16, t_copy16 = _median_seconds(run_bf16, lambda: np.copyto(dst, src))
        figures[f"fp8_{name.removesuffix('_f32')}_bf16_gbps"] = out_bytes / t_bf16 / 1e9
        copy_times += [t_copy, t_copy16]
    figures["memcpy_gbps"] = out_bytes / statistics.median(copy_times) / 1e9
    return figures


def main() -> None:
    figures = measure()
    print(
        f"fp8 dequantize, {SHAPE[0]}x{SHAPE[1]} -> float32 ({SHAPE[0] * SHAPE[1] * 4 / 1e6:.0f} MB)"
    )
    for name, value in figures.items():
        print(f"  {name:28s} {value:6.2f} GB/s")


if __name__ == "__main__":
    main()
