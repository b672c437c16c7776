"""The device path: Paddle sources through the same dequantize give the numpy bits.

Sources are converted the way the load pipeline ships them (BF16 as bfloat16,
integers as themselves) with the core's ``source_to_paddle``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

from flexq import TargetSlice, compose
from flexq.formatkit.arrays import to_numpy
from flexq.testing import decode_box, source_to_paddle

LAYOUTS = [
    dict(fmt="pack-quantized", bits=4, strategy="group", group=16, symmetric=False),
    dict(fmt="pack-quantized", bits=4, strategy="group", group=16, act_order=True),
    dict(fmt="pack-quantized", bits=8, strategy="channel", symmetric=False, scale_dtype="F16"),
    dict(fmt="pack-quantized", bits=2, strategy="tensor", symmetric=False, scale_dtype="F32"),
    dict(fmt="pack-quantized", bits=4, strategy="block", block=(8, 24), symmetric=False),
    dict(fmt="pack-quantized", bits=3, strategy="group", group=16, symmetric=False),
    dict(fmt="pack-quantized", bits=5, strategy="channel", symmetric=False, dense=False),
    dict(fmt="pack-quantized", bits=7, strategy="block", block=(8, 24), act_order=False),
    dict(fmt="int-quantized", bits=8, strategy="channel"),
    dict(fmt="int-quantized", bits=8, strategy="group", group=32, symmetric=False),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("out", ["float32", "bfloat16"])
def test_paddle_sources_give_the_numpy_bits_for_local_and_global_plans(
    tmp_path: Path, oracle: Any, layout: dict[str, Any], out: str
) -> None:
    case = oracle.random_case(np.random.default_rng(4), shape=(40, 96), **layout)
    ct = compose(case.save(tmp_path), ["ct-int"])
    for target in (
        TargetSlice((40, 96), (29, 61), (5, 19), out),
        TargetSlice((40, 96), (20, 96), (20, 0), out),
        TargetSlice.whole((40, 96), out),
    ):
        box = (target.global_offset, target.local_shape)
        from_numpy = decode_box(ct, "fc.weight", *box, out)
        from_paddle = decode_box(ct, "fc.weight", *box, out, paddle=True)
        assert isinstance(from_paddle, paddle.Tensor)
        assert str(from_paddle.dtype) == f"paddle.{out}"
        np.testing.assert_array_equal(to_numpy(from_paddle), from_numpy)
        (o0, i0), (no, ni) = target.global_offset, target.local_shape
        want = oracle.round_to(case.expected[o0 : o0 + no, i0 : i0 + ni], out)
        np.testing.assert_array_equal(from_numpy, want)


def test_upstream_apply_protocol_returns_a_paddle_tensor_with_the_numpy_bits(
    tmp_path: Path, oracle: Any
) -> None:
    case = oracle.random_case(
        np.random.default_rng(8), fmt="pack-quantized", bits=4, strategy="group",
        shape=(64, 128), group=32, symmetric=False,
    )  # fmt: skip
    ct = compose(case.save(tmp_path), ["ct-int"])
    plan = ct.read_plan("fc.weight", TargetSlice((64, 128), (32, 128), (32, 0), "bfloat16"))
    sources = {
        k: source_to_paddle(v, ct.checkpoint.info(k).dtype)
        for k, v in ct.read_sources(plan).items()
    }
    result = ct.apply("fc.weight", sources, paddle.bfloat16)
    assert result.shape == [32, 128]
    np.testing.assert_array_equal(to_numpy(result), ct.load("fc.weight", "bfloat16")[32:])
