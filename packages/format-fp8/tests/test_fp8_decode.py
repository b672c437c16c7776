"""The E4M3 decode-and-scale kernels against ml_dtypes, over every code and scale class.

``decode_scaled`` picks, per band, integer arithmetic (codes moved into a
float32's bit fields, scale pre-multiplied by 2^120) or the table lookup
(NaN codes, scales of magnitude 2^8 or more, NaN scales). Both must give the
bits of ``float32(e4m3(code)) * scale``. ``lookup_rounded`` of the E4M3 table (a box
under one scale into a bfloat16 target) must give exactly the core's rounding of those bits.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import flexq.formatkit.bands as core_ops
from flexq.formatkit import E4M3_TO_FLOAT32, NumpyOps, float32_to_bfloat16_bits, lookup_rounded
from flexq.testing import same_bfloat16, same_bits
from flexq.testing.strategies import codes_and_scale, examples
from flexq_fp8.decode import decode_scaled


def expected(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    values = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values * scale, dtype=np.float32)


#: scale values of every class: tiny subnormal, normal, just under and at 2^8,
#: huge, negative, zero, infinities, NaN.
# Exact float32 values: hypothesis refuses a float the array dtype cannot hold exactly.
SPECIAL = [
    float(np.float32(x))
    for x in (1e-45, 3e-39, 1.1754944e-38, 1e-30, 0.0123, 1.0, 255.99998, 256.0, 3e38, -0.5)
]
SCALES = st.sampled_from([*SPECIAL, 0.0, -0.0, np.inf, -np.inf, np.nan]) | st.floats(
    width=32, allow_nan=True, allow_infinity=True
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    codes, scale, band = draw(codes_and_scale(side=12, rank=3, scales=SCALES, band=50))
    if not draw(st.booleans()):
        codes[(codes & 0x7F) == 0x7F] &= 0xF0  # no NaN code: the arithmetic path
    return codes, scale, band


@examples(300)
@given(case=cases())
def test_decode_scaled_matches_ml_dtypes_for_every_code_and_scale(
    case: tuple[np.ndarray, np.ndarray, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    codes, scale, band = case
    monkeypatch.setattr(core_ops, "_BAND_CODES", band)  # many small bands: paths mix
    got = decode_scaled(NumpyOps(), codes, scale)
    into = np.full(codes.shape, 9.0, np.float32)
    filled = decode_scaled(NumpyOps(), codes, scale, out=into)
    want = expected(codes, scale)
    same_bits(got, want)
    assert filled is into
    same_bits(into, want)


@pytest.mark.parametrize("scale", [0.0123, 3e-39, 255.99998, -7.5])
def test_every_code_decodes_exactly_through_the_arithmetic_path(scale: float) -> None:
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
    codes[(codes & 0x7F) == 0x7F] = 0  # NaN codes would send the band to the table
    s = np.full((1, 1), scale, np.float32)
    same_bits(decode_scaled(NumpyOps(), codes, s), expected(codes, s))


def test_non_contiguous_codes_and_paddle_free_fallbacks_agree() -> None:
    codes = np.random.default_rng(2).integers(0, 256, (40, 60), dtype=np.uint8)
    s = np.array(0.25, np.float32)
    view = codes[:, ::2]  # not contiguous: the table path
    same_bits(decode_scaled(NumpyOps(), view, s), expected(np.ascontiguousarray(view), s))


@examples(300)
@given(case=cases())
# the case CI's hypothesis found: a NaN code (negative) times a NaN scale
@example(case=(np.array([[[255]]], np.uint8), np.array([[[np.nan]]], np.float32), 1))
def test_one_scale_into_bfloat16_is_the_core_s_rounding_of_the_float32_decode(
    case: tuple[np.ndarray, np.ndarray, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    codes, scales, band = case
    monkeypatch.setattr(core_ops, "_BAND_CODES", band)  # odd bands: single-code lookups
    scale = scales.reshape(-1)[:1]  # one float32 scale, as a (1,) array
    into = np.full(codes.shape, 0x1234, np.uint16)
    got = lookup_rounded(E4M3_TO_FLOAT32, codes, scale[0], into)
    assert got is into
    # bit for bit what the load path gave before: the float32 decode, rounded by the core,
    # except that a NaN code times a NaN scale is a NaN of either sign (numpy's float32
    # multiply returns one operand's NaN or the other's, by loop): there, NaN is asserted.
    want = float32_to_bfloat16_bits(decode_scaled(NumpyOps(), codes, scale))
    both = np.isnan(scale[0]) & ((codes & 0x7F) == 0x7F)
    np.testing.assert_array_equal(got[~both], want[~both])
    assert ((got[both] & 0x7FFF) > 0x7F80).all()
    # and the independent oracle: ml_dtypes' product, rounded by ml_dtypes
    oracle = expected(codes, scale).astype(ml_dtypes.bfloat16).view(np.uint16)
    same_bfloat16(got, oracle)


def test_every_code_pair_is_looked_up_in_memory_order() -> None:
    # All 65536 (first, second) byte pairs, each pair's codes in both orders.
    codes = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(256, 512)
    scale = np.float32(0.0123)
    got = lookup_rounded(E4M3_TO_FLOAT32, codes, scale, np.empty(codes.shape, np.uint16))
    np.testing.assert_array_equal(
        got, float32_to_bfloat16_bits(decode_scaled(NumpyOps(), codes, scale))
    )


def test_strided_and_wide_codes_round_to_the_same_bits_in_one_gather() -> None:
    codes = np.random.default_rng(4).integers(0, 256, (40, 60), dtype=np.uint8)
    scale = np.float32(0.0123)
    want = float32_to_bfloat16_bits(decode_scaled(NumpyOps(), codes, scale))
    strided = np.empty((40, 120), np.uint8)
    strided[:, ::2] = codes
    for view in (strided[:, ::2], codes.astype(np.int32)):  # not C-contiguous uint8
        got = lookup_rounded(E4M3_TO_FLOAT32, view, scale, np.empty(codes.shape, np.uint16))
        np.testing.assert_array_equal(got, want)
