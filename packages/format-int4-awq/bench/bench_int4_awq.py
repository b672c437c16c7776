"""Dequantize throughput of the int4-awq format next to a numpy memcpy of the same output bytes.

Run ``python bench_int4_awq.py`` (or ``nox -s bench``). Builds a 4096 x 4096
linear (group size 128) in a temporary checkpoint, reads its components once,
then times the CPU dequantize to float32 (GEMM and GEMV layouts) and
``np.copyto`` of an equally large float32 array, both into outputs written
before, alternating, median of 5.
"""

from __future__ import annotations

import numpy as np

from flexq import RawTensor
from flexq.testing.throughput import Case, measure_cases, report
from flexq_int4_awq import quantization_config

OUT_FEATURES = 4096
IN_FEATURES = 4096
GROUP_SIZE = 128
ROUNDS = 5


def _tensors(version: str, rng: np.random.Generator) -> dict[str, RawTensor]:
    """Random words and scales in the layout's shapes (decode cost does not depend on values)."""
    ng = IN_FEATURES // GROUP_SIZE

    def words(*shape: int) -> np.ndarray:
        return rng.integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)

    scales = (rng.standard_normal((max(OUT_FEATURES, IN_FEATURES), ng)) * 0.01).astype(np.float16)
    if version == "gemm":
        qw, qz = words(IN_FEATURES, OUT_FEATURES // 8), words(ng, OUT_FEATURES // 8)
        sc = np.ascontiguousarray(scales[:OUT_FEATURES].T)
    else:
        width = -(-ng // 8)  # g = 128: no extra padding multiple
        qw, qz = words(OUT_FEATURES, IN_FEATURES // 8), words(OUT_FEATURES, width)
        sc = np.zeros((OUT_FEATURES, 8 * width), dtype=np.float16)
        sc[:, :ng] = scales[:OUT_FEATURES]
    return {
        "fc.qweight": RawTensor.of(qw),
        "fc.qzeros": RawTensor.of(qz),
        "fc.scales": RawTensor.of(sc),
    }


def measure() -> dict[str, float]:
    """GB/s of float32 output: dequantize (GEMM, GEMV) and np.copyto of the same bytes."""
    rng = np.random.default_rng(0)
    cases = {
        f"int4_awq_{version}": Case(
            _tensors(version, rng),
            "fc.weight",
            {"quantization_config": quantization_config(GROUP_SIZE, version)},
        )
        for version in ("gemm", "gemv")
    }
    return measure_cases("int4-awq", cases, ROUNDS)


def main() -> None:
    """Print the figures of :func:`measure`."""
    title = f"int4-awq dequantize {OUT_FEATURES}x{IN_FEATURES} g={GROUP_SIZE} (median of {ROUNDS})"
    print(report(title, measure()))


if __name__ == "__main__":
    main()
