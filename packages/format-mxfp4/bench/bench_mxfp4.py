"""MXFP4 dequantize throughput on the CPU, next to a numpy memcpy of the same output bytes.

Run ``python bench/bench_mxfp4.py``; ``nox -s bench`` calls :func:`measure`.
The tensor is gpt-oss-20b sized: 8 experts of a [2880, 2880] down projection
(265 MB of float32 output; the logical [E, in, out] is the stored rows
transposed, as transformers decodes gpt-oss), decoded through the composed transform from
sources already in memory (no file I/O in the timed part) into outputs written
before, as memcpy's destination is.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

import flexq

KEY = "model.layers.0.mlp.experts.down_proj"


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(
    experts: int = 8, rows: int = 2880, cols: int = 2880, rounds: int = 5
) -> dict[str, float]:
    """Median GB/s of float32 output for dequantize (float32 and bfloat16 out) and for memcpy."""
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
    with tempfile.TemporaryDirectory() as tmp:
        ct = flexq.compose(flexq.save_checkpoint(tmp, tensors), formats=["mxfp4"])
        plan = ct.plan(KEY, flexq.TargetSlice.whole(ct.entries[KEY].shape, "float32"))
        sources = ct.read_sources(plan)
        ct.checkpoint.close()
    out_bytes = experts * rows * cols * 4
    src = np.ones(out_bytes // 4, dtype=np.float32)
    dst = np.ones_like(src)
    # Outputs written before, as a model's parameters are; bfloat16 goes through
    # a float32 working buffer, as load_state_dict does for bfloat16 targets.
    shape = ct.entries[KEY].shape  # [E, in, out]: the stored rows become the last axis
    into, work = np.ones(shape, np.float32), np.ones(shape, np.float32)
    into16 = np.ones(shape, np.uint16)

    def bf16() -> object:
        return ct.dequantize(KEY, sources, plan, "bfloat16", out=into16, scratch=work)

    times: dict[str, list[float]] = {"mxfp4": [], "mxfp4_bf16": [], "memcpy": []}
    for _ in range(rounds):  # alternate so drift on a shared machine hits all alike
        times["mxfp4"].append(_timed(lambda: ct.dequantize(KEY, sources, plan, "float32", into)))
        times["mxfp4_bf16"].append(_timed(bf16))
        times["memcpy"].append(_timed(lambda: np.copyto(dst, src)))
    return {f"{k}_gbps": out_bytes / statistics.median(v) / 1e9 for k, v in times.items()}


def main() -> None:
    figures = measure()
    print(
        f"mxfp4 dequantize [8, 2880, 2880]: {figures['mxfp4_gbps']:.2f} GB/s float32 out "
        f"({figures['mxfp4_bf16_gbps']:.2f} GB/s with the bfloat16 rounding), "
        f"memcpy {figures['memcpy_gbps']:.2f} GB/s"
    )


if __name__ == "__main__":
    main()
