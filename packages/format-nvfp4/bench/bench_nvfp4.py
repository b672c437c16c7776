"""NVFP4 dequantize throughput on the CPU, next to a numpy memcpy of the same output bytes.

Run ``python bench/bench_nvfp4.py``; ``nox -s bench`` calls :func:`measure`. The
tensor is a Llama-3-8B down projection, [4096, 14336] (235 MB of float32 output),
in the compressed-tensors and ModelOpt layouts, decoded through the composed
transform from sources already in memory (no file I/O in the timed part) into
outputs written before, as memcpy's destination is.
"""

from __future__ import annotations

import numpy as np

import flexq
from flexq.testing.throughput import Case, measure_cases, report

BASE = "model.layers.0.mlp.down_proj"
KEY = BASE + ".weight"
NAMES = {
    "ct": (".weight_packed", ".weight_scale", ".weight_global_scale"),
    "modelopt": (".weight", ".weight_scale", ".weight_scale_2"),
}


def measure(rows: int = 4096, cols: int = 14336, rounds: int = 5) -> dict[str, float]:
    """Median GB/s of float32 output per layout (float32 and bfloat16 out) and for memcpy."""
    rng = np.random.default_rng(0)
    packed = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
    scales = rng.integers(0x20, 0x60, (rows, cols // 16), dtype=np.uint8)  # E4M3 2^-3 .. 2^5
    cases = {}
    for layout, (codes, scale, glob) in NAMES.items():
        g = np.full((1,) if layout == "ct" else (), 2.5, np.float32)
        tensors = {
            BASE + codes: flexq.RawTensor("U8", packed),
            BASE + scale: flexq.RawTensor("F8_E4M3", scales),
            BASE + glob: flexq.RawTensor("F32", g),
        }
        cases[f"nvfp4_{layout}"] = Case(tensors, KEY)
    return measure_cases("nvfp4", cases, rounds)


def main() -> None:
    """Print the figures of :func:`measure`."""
    print(report("nvfp4 dequantize [4096, 14336], compressed-tensors and ModelOpt", measure()))


if __name__ == "__main__":
    main()
