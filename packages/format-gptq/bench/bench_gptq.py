"""Dequantize throughput of the gptq format next to a numpy memcpy of the same output bytes.

Run ``python bench_gptq.py`` (or ``nox -s bench``). Builds 4096 x 4096 linears
(4 bits with groups of 128 in order and in act-order, 8 bits, 3 bits) in a
temporary checkpoint, reads their components once, then times the CPU
dequantize to float32 and to bfloat16 (``<case>_bf16``, GB/s of float32-sized output)
and ``np.copyto`` of an equally large float32 array, all into outputs written before,
alternating, median of 5.
"""

from __future__ import annotations

import numpy as np

from flexq import RawTensor
from flexq.testing.throughput import Case, measure_cases, report
from flexq_gptq import quantization_config
from flexq_gptq.packing import pack_codes

OUT_FEATURES = 4096
IN_FEATURES = 4096
GROUP_SIZE = 128
ROUNDS = 5
#: name -> (bits, act-order, symmetric: every zero 2^(bits-1), as GPTQ's default sym=True
#: writes them; else random zeros)
CASES = {
    "gptq4": (4, False, False),
    "gptq4_sym": (4, False, True),
    "gptq4_act_order": (4, True, False),
    "gptq8": (8, False, False),
    "gptq3": (3, False, False),
}


def _tensors(
    bits: int, act_order: bool, sym: bool, rng: np.random.Generator
) -> dict[str, RawTensor]:
    """Random words and scales in the layout's shapes (decode cost does not depend on values)."""
    ng = IN_FEATURES // GROUP_SIZE

    def words(*shape: int) -> np.ndarray:
        return rng.integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)

    g_idx = np.arange(IN_FEATURES) // GROUP_SIZE
    if act_order:
        g_idx = g_idx[rng.permutation(IN_FEATURES)]
    return {
        "fc.qweight": RawTensor.of(words(IN_FEATURES * bits // 32, OUT_FEATURES)),
        "fc.qzeros": RawTensor.of(
            pack_codes(np.full((ng, OUT_FEATURES), (1 << (bits - 1)) - 1), bits, axis=1)
            if sym  # stored as z - 1 (GPTQ v1)
            else words(ng, OUT_FEATURES * bits // 32)
        ),
        "fc.scales": RawTensor.of(
            (rng.standard_normal((ng, OUT_FEATURES)) * 0.01).astype(np.float16)
        ),
        "fc.g_idx": RawTensor.of(g_idx.astype(np.int32)),
    }


def measure() -> dict[str, float]:
    """GB/s of float32 output: dequantize (each case) and np.copyto of the same bytes."""
    rng = np.random.default_rng(0)
    cases = {
        name: Case(
            _tensors(bits, act_order, sym, rng),
            "fc.weight",
            {"quantization_config": quantization_config(bits, GROUP_SIZE, desc_act=act_order)},
        )
        for name, (bits, act_order, sym) in CASES.items()
    }
    return measure_cases("gptq", cases, ROUNDS)


def main() -> None:
    """Print the figures of :func:`measure`."""
    title = f"gptq dequantize {OUT_FEATURES}x{IN_FEATURES} g={GROUP_SIZE} (median of {ROUNDS})"
    print(report(title, measure()))


if __name__ == "__main__":
    main()
