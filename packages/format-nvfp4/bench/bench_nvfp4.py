"""NVFP4 dequantize throughput on the CPU, next to a numpy memcpy of the same output bytes.

Run ``python bench/bench_nvfp4.py``; ``nox -s bench`` calls :func:`measure`. The
tensor is a Llama-3-8B down projection, [4096, 14336] (235 MB of float32 output),
in the compressed-tensors and ModelOpt layouts, decoded through the composed
transform from sources already in memory (no file I/O in the timed part) into
outputs written before, as memcpy's destination is.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial

import numpy as np

import flexq

BASE = "model.layers.0.mlp.down_proj"
KEY = BASE + ".weight"
NAMES = {
    "ct": (".weight_packed", ".weight_scale", ".weight_global_scale"),
    "modelopt": (".weight", ".weight_scale", ".weight_scale_2"),
}


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(rows: int = 4096, cols: int = 14336, rounds: int = 5) -> dict[str, float]:
    """Median GB/s of float32 output per layout (float32 and bfloat16 out) and for memcpy."""
    rng = np.random.default_rng(0)
    packed = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
    scales = rng.integers(0x20, 0x60, (rows, cols // 16), dtype=np.uint8)  # E4M3 2^-3 .. 2^5
    composed = {}
    with tempfile.TemporaryDirectory() as tmp:
        for layout, (codes, scale, glob) in NAMES.items():
            g = np.full((1,) if layout == "ct" else (), 2.5, np.float32)
            tensors = {
                BASE + codes: flexq.RawTensor("U8", packed),
                BASE + scale: flexq.RawTensor("F8_E4M3", scales),
                BASE + glob: flexq.RawTensor("F32", g),
            }
            ct = flexq.compose(flexq.save_checkpoint(f"{tmp}/{layout}", tensors), ["nvfp4"])
            plan = ct.plan(KEY, flexq.TargetSlice.whole((rows, cols), "float32"))
            composed[layout] = (ct, plan, ct.read_sources(plan))
            ct.checkpoint.close()
    out_bytes = rows * cols * 4
    src = np.ones(out_bytes // 4, dtype=np.float32)
    dst = np.ones_like(src)
    into, work = np.ones((rows, cols), np.float32), np.ones((rows, cols), np.float32)
    into16 = np.ones((rows, cols), np.uint16)
    times: dict[str, list[float]] = {"memcpy": []}
    for _ in range(rounds):  # alternate so drift on a shared machine hits all alike
        for layout, (ct, plan, sources) in composed.items():
            f32 = partial(ct.dequantize, KEY, sources, plan, "float32", into)
            bf16 = partial(ct.dequantize, KEY, sources, plan, "bfloat16", into16, work)
            times.setdefault(f"nvfp4_{layout}", []).append(_timed(f32))
            times.setdefault(f"nvfp4_{layout}_bf16", []).append(_timed(bf16))
        times["memcpy"].append(_timed(lambda: np.copyto(dst, src)))
    return {f"{k}_gbps": out_bytes / statistics.median(v) / 1e9 for k, v in times.items()}


def main() -> None:
    f = measure()
    print(
        f"nvfp4 dequantize [4096, 14336]: compressed-tensors {f['nvfp4_ct_gbps']:.2f} GB/s "
        f"float32 out ({f['nvfp4_ct_bf16_gbps']:.2f} with the bfloat16 rounding), ModelOpt "
        f"{f['nvfp4_modelopt_gbps']:.2f} ({f['nvfp4_modelopt_bf16_gbps']:.2f}), "
        f"memcpy {f['memcpy_gbps']:.2f} GB/s"
    )


if __name__ == "__main__":
    main()
