"""bitsandbytes dequantize throughput on the CPU, next to a numpy memcpy of the same output bytes.

Run ``python bench/bench_bitsandbytes.py``; ``nox -s bench`` calls :func:`measure`.
The tensor is a 7B-class [4096, 4096] projection (67 MB of float32 output) as
NF4 with double quantization (what the "-bnb-4bit" repos hold) and as LLM.int8,
decoded through the composed transform from sources already in memory (no
file I/O in the timed part) into outputs written before, as memcpy's
destination is.
"""

from __future__ import annotations

import numpy as np

from flexq.testing.throughput import Case, measure_cases, report
from flexq_bitsandbytes import quantize

NF4_KEY = "model.layers.0.mlp.down_proj.weight"
INT8_KEY = "model.layers.0.mlp.up_proj.weight"


def measure(rows: int = 4096, cols: int = 4096, rounds: int = 5) -> dict[str, float]:
    """Median GB/s of float32 output: NF4 (float32 and bfloat16 out), LLM.int8, memcpy."""
    w = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32) * 0.02
    tensors = {**quantize({NF4_KEY: w}), **quantize({INT8_KEY: w}, mode="int8")}
    cases = {"nf4": Case(tensors, NF4_KEY), "int8": Case(tensors, INT8_KEY, bfloat16=False)}
    return measure_cases("bitsandbytes", cases, rounds)


def main() -> None:
    """Print the figures of :func:`measure`."""
    print(report("bitsandbytes dequantize [4096, 4096], NF4 and LLM.int8", measure()))


if __name__ == "__main__":
    main()
