"""The encoder: scale rule, round-to-nearest-even with saturation, nibble order, round trips."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import flexq
from flexq_mxfp4 import quantize, quantize_array

RefDecode = Callable[[np.ndarray, np.ndarray, int], np.ndarray]
Build = Callable[..., Path]


def test_worked_example_encodes_to_its_bytes() -> None:
    x = np.zeros(32, dtype=np.float32)
    x[:4] = [1.0, 2.0, 12.0, -12.0]
    packed, scales = quantize_array(x)
    assert scales.tolist() == [0x80]  # floor(log2(12)) - 2 = 1
    assert packed[:2].tolist() == [0x21, 0xF7]  # low nibble first
    assert packed.dtype == np.uint8
    assert scales.dtype == np.uint8


def test_elements_round_to_nearest_even_and_saturate_at_six() -> None:
    # amax 4 gives shared exponent 0: elements are quantized as they are.
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 4.0, -0.25, -2.5, 5.5, 0.3]
    x = np.array(ties + [0.0] * 20, dtype=np.float32)
    packed, scales = quantize_array(x)
    assert scales.tolist() == [127]
    codes = np.stack([packed & 15, packed >> 4], axis=-1).reshape(-1)
    decoded = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    want = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 4.0, -0.0, -2.0, 6.0, 0.5]
    np.testing.assert_array_equal(decoded[:12], want)
    assert np.signbit(decoded[8])
    big = np.array([7.9, 7.0, -7.5] + [1.0] * 29, dtype=np.float32)  # amax < 8: exponent 0
    packed, scales = quantize_array(big)
    assert scales.tolist() == [127]
    assert packed[0] == 0x77
    assert packed[1] & 15 == 0xF


def test_scale_rule_clamps_and_marks_non_finite_blocks() -> None:
    x = np.zeros((4, 32), dtype=np.float32)
    x[1, 0] = 2.0**-140  # floor(log2) - 2 = -142 -> clamped to -127
    x[2, 3] = np.nan
    x[3, 0] = np.float32(3e38)  # floor(log2) = 127 -> 125
    _, scales = quantize_array(x)
    assert scales[:, 0].tolist() == [0x00, 0x00, 0xFF, 125 + 127]


@pytest.mark.parametrize(("packed_dtype", "scale_dtype"), [("U8", "U8"), ("F4", "F8_E8M0")])
def test_gpt_oss_encoder_output_loads_back(
    tmp_path: Path, build: Build, ref_decode: RefDecode, packed_dtype: str, scale_dtype: str
) -> None:
    # the logical [E, in, out] = [2, 64, 3] is stored as [E, out, in/32, 16] blocks
    x = np.random.default_rng(0).normal(size=(2, 64, 3)).astype(np.float32)
    tensors = quantize({"experts.down_proj": x}, packed_dtype=packed_dtype, scale_dtype=scale_dtype)
    blocks, scales = tensors["experts.down_proj_blocks"], tensors["experts.down_proj_scales"]
    assert (blocks.dtype, blocks.data.shape) == (packed_dtype, (2, 3, 2, 16))
    assert (scales.dtype, scales.data.shape) == (scale_dtype, (2, 3, 2))
    ct = flexq.compose(build(tmp_path / "c", tensors), formats=["mxfp4"])
    out = ct.load("experts.down_proj", "float32")
    want = ref_decode(blocks.data.reshape(2, 3, 32), scales.data, 64).transpose(0, 2, 1)
    np.testing.assert_array_equal(out, want)
    assert np.abs(out - x).max() <= np.abs(x).max() / 2  # the encoder's input, quantized


def test_compressed_tensors_encoder_handles_a_partial_last_block(
    tmp_path: Path, build: Build, ref_decode: RefDecode
) -> None:
    x = np.linspace(-3, 5, 4 * 40, dtype=np.float32).reshape(4, 40)
    tensors = quantize({"m.weight": x}, layout="compressed-tensors")
    packed, scales = tensors["m.weight_packed"].data, tensors["m.weight_scale"].data
    assert packed.shape == (4, 20)
    assert scales.shape == (4, 2)
    ct = flexq.compose(build(tmp_path / "c", tensors), formats=["mxfp4"])
    np.testing.assert_array_equal(ct.load("m.weight", "float32"), ref_decode(packed, scales, 40))


def test_encoder_rejects_bad_shapes_and_options() -> None:
    with pytest.raises(ValueError, match="multiple|32"):
        quantize({"w": np.zeros((2, 40))})
    with pytest.raises(ValueError, match="2k"):
        quantize({"w.weight": np.zeros((2, 41))}, layout="compressed-tensors")
    with pytest.raises(ValueError, match="packed_dtype"):
        quantize({"w": np.zeros((2, 32))}, packed_dtype="F8_E4M3")
    with pytest.raises(ValueError, match="layout"):
        quantize({"w": np.zeros((2, 32))}, layout="torchao")  # type: ignore[arg-type]


finite32 = st.floats(allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=80, deadline=None)
@given(
    x=hnp.arrays(
        np.float32,
        st.tuples(st.integers(1, 3), st.integers(1, 3).map(lambda g: 32 * g)),
        elements=finite32,
    )
)
def test_round_trip_is_within_one_e2m1_step(x: np.ndarray) -> None:
    packed, scales = quantize_array(x)
    codes = np.stack([packed & 15, packed >> 4], axis=-1).reshape(x.shape)
    elems = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    scale = np.repeat(scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float64), 32, axis=-1)
    m = np.abs(x.astype(np.float64)) / scale  # the element before rounding
    step = np.where(m < 2, 0.5, np.where(m < 4, 1.0, 2.0))
    assert (np.abs(elems * scale - x) <= step * scale).all()
    # Elements are exactly ml_dtypes' round-to-nearest-even of the clipped scaled value.
    clipped = np.clip(x.astype(np.float64) / scale, -6, 6).astype(ml_dtypes.float4_e2m1fn)
    np.testing.assert_array_equal(elems, clipped.astype(np.float64))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 50).map(lambda k: 2 * k))
def test_quantize_then_load_matches_the_reference(seed: int, n: int) -> None:
    x = np.random.default_rng(seed).standard_cauchy((3, n)).astype(np.float32)
    tensors = quantize({"m.weight": x}, layout="compressed-tensors")
    with tempfile.TemporaryDirectory() as tmp:
        ct = flexq.compose(flexq.save_checkpoint(tmp, tensors), formats=["mxfp4"])
        out = ct.load("m.weight", "float32")
        ct.checkpoint.close()
    packed, scales = quantize_array(x)
    codes = np.stack([packed & 15, packed >> 4], axis=-1).reshape(3, n)
    elems = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    scale = np.repeat(scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float32), 32, axis=-1)
    np.testing.assert_array_equal(out, elems * scale[:, :n])
