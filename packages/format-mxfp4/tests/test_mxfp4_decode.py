"""Dequantization is bit-exact against the ml_dtypes reference, in both layouts and every dtype."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flexq
from flexq.formatkit import E2M1_PAIRS, E8M0_TO_FLOAT32, float32_to_bfloat16_bits
from flexq.testing import same_bfloat16
from flexq.testing.strategies import examples
from flexq_mxfp4.decode import dequantize

FORMATS = ["mxfp4"]
RefDecode = Callable[[np.ndarray, np.ndarray, int], np.ndarray]
Build = Callable[..., Path]


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def test_worked_example_from_the_spec_notes(tmp_path: Path, build: Build) -> None:
    blocks = np.zeros((1, 16), dtype=np.uint8)
    blocks[0, :2] = [0x21, 0xF7]
    path = build(
        tmp_path / "c",
        {
            "w_blocks": flexq.RawTensor("U8", blocks),
            "w_scales": flexq.RawTensor("U8", np.array([0x80], dtype=np.uint8)),
        },
    )
    out = flexq.compose(path, formats=FORMATS).load("w", "float32")
    np.testing.assert_array_equal(out[:4], np.array([1.0, 2.0, 12.0, -12.0], dtype=np.float32))
    np.testing.assert_array_equal(out[4:], np.zeros(28, dtype=np.float32))


def test_tables_match_ml_dtypes_for_every_byte() -> None:
    codes = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    b = np.arange(256)
    np.testing.assert_array_equal(bits(E2M1_PAIRS[:, 0]), bits(codes[b & 15]))
    np.testing.assert_array_equal(bits(E2M1_PAIRS[:, 1]), bits(codes[b >> 4]))
    e8m0 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    np.testing.assert_array_equal(bits(E8M0_TO_FLOAT32), bits(e8m0))
    assert E8M0_TO_FLOAT32[0] == np.float32(2.0**-127)


def test_gpt_oss_experts_are_bit_exact(tmp_path: Path, mx: Any, stored: tuple[str, str]) -> None:
    packed_dtype, scale_dtype = stored
    rng = np.random.default_rng(1)
    e, out_f, g = 3, 10, 4  # [E, 2I, H/32, 16]
    packed, scales = mx.random(rng, (e, out_f), g * 32)
    blocks = packed.reshape(e, out_f, g, 16)
    key = "model.layers.0.mlp.experts.gate_up_proj"
    path = mx.build(
        tmp_path / "c",
        {
            key + "_blocks": flexq.RawTensor(packed_dtype, blocks),
            key + "_scales": flexq.RawTensor(scale_dtype, scales),
            key + "_bias": flexq.RawTensor("BF16", np.zeros((e, out_f), dtype=np.uint16)),
        },
        mx.gpt_oss,
    )
    ct = flexq.compose(path, formats=FORMATS)
    # the unquantized twin's [E, in, out] (transformers' convert_moe_packed_tensors)
    assert ct.entries[key].shape == (e, g * 32, out_f)
    assert ct.entries[key].owner == "mxfp4"
    assert ct.entries[key + "_bias"].is_passthrough
    want = mx.ref_decode(packed, scales, g * 32).transpose(0, 2, 1)
    assert np.isnan(want).any()
    assert np.isinf(want).any()
    np.testing.assert_array_equal(bits(ct.load(key, "float32")), bits(want))
    bf16 = want.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(ct.load(key, "bfloat16"), bf16)


@pytest.mark.parametrize("n", [64, 96, 40])
def test_compressed_tensors_layout_is_bit_exact(
    tmp_path: Path, mx: Any, stored: tuple[str, str], n: int
) -> None:
    packed_dtype, scale_dtype = stored
    rng = np.random.default_rng(n)
    packed, scales = mx.random(rng, (12,), n)  # n=40 ends on a partial block
    path = mx.build(
        tmp_path / "c",
        {
            "model.layers.0.mlp.down_proj.weight_packed": flexq.RawTensor(packed_dtype, packed),
            "model.layers.0.mlp.down_proj.weight_scale": flexq.RawTensor(scale_dtype, scales),
        },
        mx.ct,
    )
    ct = flexq.compose(path, formats=FORMATS)
    key = "model.layers.0.mlp.down_proj.weight"
    assert ct.entries[key].shape == (12, n)
    np.testing.assert_array_equal(
        bits(ct.load(key, "float32")), bits(mx.ref_decode(packed, scales, n))
    )


def one_block(tmp_path: Path, build: Build, scale: int, byte: int = 0x7F) -> np.ndarray:
    blocks = np.full((1, 16), byte, dtype=np.uint8)
    path = build(
        tmp_path / f"s{scale}",
        {
            "w_blocks": flexq.RawTensor("U8", blocks),
            "w_scales": flexq.RawTensor("U8", np.array([scale], dtype=np.uint8)),
        },
    )
    return flexq.compose(path, formats=FORMATS).load("w", "float32")


def test_scale_0xff_makes_the_whole_block_nan_including_zeros(tmp_path: Path, build: Build) -> None:
    out = one_block(tmp_path, build, 0xFF, byte=0x80)  # elements +0 and -0
    assert np.isnan(out).all()


def test_scale_0x00_is_2_to_the_minus_127_exactly(tmp_path: Path, build: Build) -> None:
    out = one_block(tmp_path, build, 0x00, byte=0x71)  # elements 0.5 and 6
    np.testing.assert_array_equal(out[0::2], np.float32(2.0**-128))
    np.testing.assert_array_equal(out[1::2], np.float32(6 * 2.0**-127))


def test_float16_output_flushes_scale_0x00_blocks_to_signed_zero(
    tmp_path: Path, build: Build
) -> None:
    blocks = np.full((1, 16), 0xF7, dtype=np.uint8)  # +6, -6
    path = build(
        tmp_path / "c",
        {
            "w_blocks": flexq.RawTensor("U8", blocks),
            "w_scales": flexq.RawTensor("U8", np.array([0x00], dtype=np.uint8)),
        },
    )
    ct = flexq.compose(path, formats=FORMATS)
    half = ct.load("w", "float16")
    assert half.dtype == np.float16
    assert (half == 0).all()
    np.testing.assert_array_equal(np.signbit(half), np.tile([False, True], 16))
    bf16 = ct.load("w", "bfloat16")  # bfloat16 keeps 2^-127 (exact subnormal)
    np.testing.assert_array_equal(
        bf16[:2],
        np.array([6.0 * 2**-127, -6.0 * 2**-127], dtype=ml_dtypes.bfloat16).view(np.uint16),
    )


def test_large_scales_overflow_to_infinity_in_float32(tmp_path: Path, build: Build) -> None:
    out = one_block(tmp_path, build, 0xFE, byte=0x71)  # 0.5 * 2^127 and 6 * 2^127
    np.testing.assert_array_equal(out[0::2], np.float32(2.0**126))
    assert np.isposinf(out[1::2]).all()


def test_natural_dtype_follows_the_model_config(tmp_path: Path, build: Build) -> None:
    tensors = {
        "w_blocks": flexq.RawTensor("U8", np.zeros((2, 1, 16), dtype=np.uint8)),
        "w_scales": flexq.RawTensor("U8", np.zeros((2, 1), dtype=np.uint8)),
    }
    path = build(tmp_path / "c", tensors, {"torch_dtype": "float16"})
    assert flexq.compose(path, formats=FORMATS).entries["w"].dtype == "float16"
    path = build(tmp_path / "d", tensors)
    assert flexq.compose(path, formats=FORMATS).entries["w"].dtype == "bfloat16"


@examples(150)
@given(
    lead=st.lists(st.integers(1, 5), min_size=0, max_size=2),
    blocks=st.integers(1, 6),
    band=st.integers(1, 400),
    transposed=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_whole_block_runs_decode_band_by_band_like_the_reference(
    lead: list[int],
    blocks: int,
    band: int,
    transposed: bool,
    seed: int,
    ref_decode: RefDecode,
    random_mx_data: Callable[..., tuple[np.ndarray, np.ndarray]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs of whole blocks go band by band over threads (bands of any size,
    even splitting a block's bytes), into a fresh array or a given one; so do gpt-oss
    experts' transposed runs [..., n, rows] (even rows by byte pairs of two rows, odd
    rows by transposed float32 bands)."""
    import flexq.formatkit.bands as core_ops
    from flexq_mxfp4.decode import _whole_blocks_transposed

    monkeypatch.setattr(core_ops, "_BAND_CODES", band)
    n = 32 * blocks
    packed, scales = random_mx_data(np.random.default_rng(seed), tuple(lead), n)
    want = ref_decode(packed, scales, n)
    if transposed and lead:
        want = np.swapaxes(want, -1, -2)

    def decode(out: np.ndarray | None) -> np.ndarray:
        if transposed and lead:
            return _whole_blocks_transposed(packed, scales, out)
        return np.asarray(dequantize(packed, scales, 0, n, out))

    got = decode(None)
    into = np.full(want.shape, 3.0, np.float32)
    assert decode(into) is into
    for result in (got, into):
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(result), nan)
        np.testing.assert_array_equal(result[~nan].view(np.uint32), want[~nan].view(np.uint32))
    # Into a bfloat16 target's memory (BoxSources.rounded_out): rounded band by band while
    # in cache, as the core would round the float32; transposed runs of an odd number of
    # rows stay float32 for the core to round.
    bits = np.full(want.shape, 0xABCD, np.uint16)
    if transposed and lead:
        rounded = _whole_blocks_transposed(packed, scales, None, bits)
    else:
        rounded = np.asarray(dequantize(packed, scales, 0, n, None, bits))
    if transposed and lead and lead[-1] % 2:
        assert rounded.dtype == np.float32
        rounded = float32_to_bfloat16_bits(rounded)
    else:
        assert rounded is bits
    same_bfloat16(rounded, float32_to_bfloat16_bits(want))
