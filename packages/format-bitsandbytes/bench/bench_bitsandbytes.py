"""bitsandbytes dequantize throughput on the CPU, next to a numpy memcpy of the same output bytes.

Run ``python bench/bench_bitsandbytes.py``; ``nox -s bench`` calls :func:`measure`.
The tensor is a 7B-class [4096, 4096] projection (67 MB of float32 output) as
NF4 with double quantization (what the "-bnb-4bit" repos hold) and as LLM.int8,
decoded through the composed transform from sources already in memory (no
file I/O in the timed part) into outputs written before, as memcpy's
destination is.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

import flexq
from flexq_bitsandbytes import quantize

NF4_KEY = "model.layers.0.mlp.down_proj.weight"
INT8_KEY = "model.layers.0.mlp.up_proj.weight"


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(rows: int = 4096, cols: int = 4096, rounds: int = 5) -> dict[str, float]:
    """Median GB/s of float32 output: NF4 (float32 and bfloat16 out), LLM.int8, memcpy."""
    w = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32) * 0.02
    tensors = {**quantize({NF4_KEY: w}), **quantize({INT8_KEY: w}, mode="int8")}
    with tempfile.TemporaryDirectory() as tmp:
        ct = flexq.compose(flexq.save_checkpoint(tmp, tensors), formats=["bitsandbytes"])
        plans = {
            k: ct.plan(k, flexq.TargetSlice.whole((rows, cols), "float32"))
            for k in (NF4_KEY, INT8_KEY)
        }
        sources = {k: ct.read_sources(p) for k, p in plans.items()}
        ct.checkpoint.close()
    out_bytes = rows * cols * 4
    src = np.ones(out_bytes // 4, dtype=np.float32)
    dst = np.ones_like(src)
    into, work = np.ones((rows, cols), np.float32), np.ones((rows, cols), np.float32)
    into16 = np.ones((rows, cols), np.uint16)

    def run(key: str, dtype: str) -> object:
        out, scratch = (into, None) if dtype == "float32" else (into16, work)
        return ct.dequantize(key, sources[key], plans[key], dtype, out=out, scratch=scratch)

    times: dict[str, list[float]] = {"nf4": [], "nf4_bf16": [], "int8": [], "memcpy": []}
    for _ in range(rounds):  # alternate so drift on a shared machine hits all alike
        times["nf4"].append(_timed(lambda: run(NF4_KEY, "float32")))
        times["nf4_bf16"].append(_timed(lambda: run(NF4_KEY, "bfloat16")))
        times["int8"].append(_timed(lambda: run(INT8_KEY, "float32")))
        times["memcpy"].append(_timed(lambda: np.copyto(dst, src)))
    return {f"{k}_gbps": out_bytes / statistics.median(v) / 1e9 for k, v in times.items()}


def main() -> None:
    f = measure()
    print(
        f"bitsandbytes dequantize [4096, 4096]: NF4 {f['nf4_gbps']:.2f} GB/s float32 out "
        f"({f['nf4_bf16_gbps']:.2f} with the bfloat16 rounding), LLM.int8 "
        f"{f['int8_gbps']:.2f} GB/s, memcpy {f['memcpy_gbps']:.2f} GB/s"
    )


if __name__ == "__main__":
    main()
