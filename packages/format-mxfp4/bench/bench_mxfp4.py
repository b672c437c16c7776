"""MXFP4 dequantize throughput on the CPU, next to a numpy memcpy of the same output bytes.

Run ``python bench/bench_mxfp4.py``; ``nox -s bench`` calls :func:`measure`.
The tensor is gpt-oss-20b sized: 8 experts of a [2880, 2880] down projection
(265 MB of float32 output; the logical [E, in, out] is the stored rows
transposed, as transformers decodes gpt-oss), decoded through the composed transform from
sources already in memory (no file I/O in the timed part) into outputs written
before, as memcpy's destination is.
"""

from __future__ import annotations

import numpy as np

import flexq
from flexq.testing.throughput import Case, measure_cases, report

KEY = "model.layers.0.mlp.experts.down_proj"


def measure(
    experts: int = 8, rows: int = 2880, cols: int = 2880, rounds: int = 5
) -> dict[str, float]:
    """Median GB/s of float32 output for dequantize (float32 and bfloat16 out) and for memcpy
    (the logical [E, in, out]: the stored rows become the last axis)."""
    rng = np.random.default_rng(0)
    g = cols // 32
    tensors = {
        KEY + "_blocks": flexq.RawTensor(
            "U8", rng.integers(0, 256, (experts, rows, g, 16), dtype=np.uint8)
        ),
        KEY + "_scales": flexq.RawTensor(
            "U8", rng.integers(118, 130, (experts, rows, g), dtype=np.uint8)
        ),
    }
    return measure_cases("mxfp4", {"mxfp4": Case(tensors, KEY)}, rounds)


def main() -> None:
    """Print the figures of :func:`measure`."""
    print(report("mxfp4 dequantize [8, 2880, 2880]", measure()))


if __name__ == "__main__":
    main()
