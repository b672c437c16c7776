"""Dequantize throughput of the fp8 format next to a memcpy of the same output bytes.

Run ``python bench/bench_fp8.py`` (or ``nox -s bench``, which calls
:func:`measure`). Times the CPU (numpy) path of the one dequantize definition
on in-memory sources -- no file I/O -- for a DeepSeek-V3-sized block-scaled
projection, into an output array written before (as a model's parameters are),
and ``np.copyto`` of the same float32 output bytes into such an array in the
same run; ``<layout>_bf16`` is the same into a bfloat16 target, as a load does it (the
format rounds itself where one scale covers the box, else the core rounds its float32
once; GB/s of float32-sized output).
Rounds alternate between all runs and the median of each is reported.
"""

from __future__ import annotations

import numpy as np

from flexq.formatkit.rounding import round_numpy
from flexq.testing.throughput import Run, gbps, report
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


def measure() -> dict[str, float]:
    """GB/s of float32 output for each layout (float32 and bfloat16 out) and for a memcpy
    of the same bytes (:func:`flexq.testing.throughput.gbps`: alternating rounds, medians)."""
    out_bytes = SHAPE[0] * SHAPE[1] * 4
    into = np.ones(SHAPE, np.float32)
    into16 = np.ones(SHAPE, np.uint16)
    runs: dict[str, Run] = {}
    for name, (layout, codes, scale) in _cases().items():

        def run(
            layout: Fp8Layout = layout, codes: np.ndarray = codes, scale: np.ndarray = scale
        ) -> object:
            return dequantize(layout, codes, scale, (0, 0), SHAPE, out=into)

        def run_bf16(
            layout: Fp8Layout = layout, codes: np.ndarray = codes, scale: np.ndarray = scale
        ) -> object:
            # As a load into a bfloat16 host target does: the format may round into the
            # target itself (one scale); else it decodes into a float32 work array and
            # the core rounds that once into the target.
            got = dequantize(layout, codes, scale, (0, 0), SHAPE, into, rounded_out=into16)
            return got if got is into16 else round_numpy(got, "bfloat16", into16)

        runs[f"fp8_{name}"] = run
        runs[f"fp8_{name.removesuffix('_f32')}_bf16"] = run_bf16
    return gbps(runs, out_bytes, ROUNDS)


def main() -> None:
    mb = SHAPE[0] * SHAPE[1] * 4 / 1e6
    print(report(f"fp8 dequantize, {SHAPE[0]}x{SHAPE[1]} -> {mb:.0f} MB of float32", measure()))


if __name__ == "__main__":
    main()
