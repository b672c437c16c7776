"""Dequantize throughput of the quark format next to a numpy memcpy of the same output bytes.

Run ``python bench_quark.py`` (or ``nox -s bench``). Builds a 4096 x 4096 linear of each
Quark weight scheme (FP8 per channel, int4 per group of 128 with Quark's "reorder"
packing, uint4 with zero points, MXFP4) in a temporary checkpoint, reads its components
once, then times the CPU dequantize to float32 and to bfloat16 (``<case>_bf16``, GB/s of
float32-sized output) and ``np.copyto`` of an equally large float32 array, all into
outputs written before, alternating, median of 5.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexq import RawTensor
from flexq.testing.throughput import Case, measure_cases, report

OUT_FEATURES = 4096
IN_FEATURES = 4096
GROUP_SIZE = 128
ROUNDS = 5


def _spec(dtype: str, qscheme: str, **kw: Any) -> dict[str, Any]:
    """One Quark weight spec as ``QTensorConfig.to_dict`` writes it."""
    return {
        "dtype": dtype,
        "is_dynamic": False,
        "qscheme": qscheme,
        "ch_axis": 0 if qscheme == "per_channel" else 1,
        "group_size": kw.get("group_size"),
        "symmetric": kw.get("symmetric", True),
        "round_method": "half_even",
        "scale_type": "float",
        "scale_format": kw.get("scale_format"),
    }


#: case -> Quark weight spec
SPECS = {
    "quark_fp8_channel": _spec("fp8_e4m3", "per_channel"),
    "quark_int4": _spec("int4", "per_group", group_size=GROUP_SIZE),
    "quark_uint4": _spec("uint4", "per_group", group_size=GROUP_SIZE, symmetric=False),
    "quark_mxfp4": _spec("fp4", "per_group", group_size=32, scale_format="e8m0"),
}


def _config(weight: dict[str, Any]) -> dict[str, Any]:
    qc = {
        "quant_method": "quark",
        "global_quant_config": {"weight": weight, "input_tensors": None, "bias": None},
        "layer_quant_config": {},
        "layer_type_quant_config": {},
        "exclude": [],
        "export": {"pack_method": "reorder", "weight_format": "real_quantized"},
    }
    return {"torch_dtype": "bfloat16", "quantization_config": qc}


def _bf16(x: np.ndarray) -> RawTensor:
    # The upper half of float32 bits: a bfloat16 value (truncated; any scale will do).
    return RawTensor(
        "BF16", (np.ascontiguousarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    )


def _tensors(case: str, rng: np.random.Generator) -> dict[str, RawTensor]:
    """Random codes and scales in the layout's shapes (decode cost does not depend on values)."""
    out_f, in_f, ng = OUT_FEATURES, IN_FEATURES, IN_FEATURES // GROUP_SIZE
    if case == "quark_fp8_channel":
        codes = rng.integers(0, 0x7E, (out_f, in_f), dtype=np.uint8)  # no NaN codes
        return {
            "fc.weight": RawTensor("F8_E4M3", codes),
            "fc.weight_scale": _bf16(rng.random(out_f) * 0.1 + 1e-3),
        }
    if case == "quark_mxfp4":
        return {
            "fc.weight": RawTensor("U8", rng.integers(0, 256, (out_f, in_f // 2), dtype=np.uint8)),
            "fc.weight_scale": RawTensor(
                "U8", rng.integers(110, 140, (out_f, in_f // 32), dtype=np.uint8)
            ),
        }

    def words(*shape: int) -> np.ndarray:
        return rng.integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)

    tensors = {
        "fc.weight": RawTensor("I32", words(in_f, out_f // 8)),
        "fc.weight_scale": _bf16(rng.random((ng, out_f)) * 0.1 + 1e-3),
    }
    zeros = words(ng, out_f // 8) if case == "quark_uint4" else np.zeros((ng, out_f // 8), np.int32)
    tensors["fc.weight_zero_point"] = RawTensor("I32", zeros)
    return tensors


def measure() -> dict[str, float]:
    """GB/s of float32 output: dequantize per scheme (float32 and bfloat16 out) and
    np.copyto of the same bytes."""
    rng = np.random.default_rng(0)
    cases = {
        case: Case(_tensors(case, rng), "fc.weight", _config(weight))
        for case, weight in SPECS.items()
    }
    return measure_cases("quark", cases, ROUNDS)


def main() -> None:
    """Print the figures of :func:`measure`."""
    print(report(f"quark dequantize {OUT_FEATURES}x{IN_FEATURES} (median of {ROUNDS})", measure()))


if __name__ == "__main__":
    main()
