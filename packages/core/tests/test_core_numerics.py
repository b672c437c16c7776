"""The one rounding step and the shared numpy/Paddle operations formats build on."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
import paddle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import flexq
from flexq.errors import TargetError
from flexq.formatkit import NumpyOps, PaddleOps
from flexq.formatkit.rounding import bfloat16_bits_to_float32, float32_to_bfloat16_bits
from flexq.testing.strategies import codes_and_scale, examples

if TYPE_CHECKING:
    from pathlib import Path


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, st.integers(0, 64), elements=st.floats(width=32)))
def test_bfloat16_rounding_matches_ml_dtypes_bit_for_bit(x: np.ndarray) -> None:
    ours = float32_to_bfloat16_bits(x)
    theirs = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    finite = ~np.isnan(x)
    np.testing.assert_array_equal(ours[finite], theirs[finite])
    assert np.isnan(bfloat16_bits_to_float32(ours[~finite])).all()


@pytest.mark.parametrize("shape", [(1 << 16,), (3, 70001), (5, 7, 9001)])
def test_bfloat16_rounding_of_large_arrays_in_chunks_matches_ml_dtypes(
    shape: tuple[int, ...],
) -> None:
    """Every float32 bit pattern class (NaN payloads of both signs, infinities,
    subnormals, values that round past the largest finite) across chunk and
    thread boundaries, in non-contiguous input too."""
    bits = np.random.default_rng(5).integers(0, 1 << 32, size=shape, dtype=np.uint64)
    x = bits.astype(np.uint32).view(np.float32)
    x.reshape(-1)[-5:] = [np.nan, -np.nan, np.inf, -np.inf, 3.4e38]
    for values in (x, np.asfortranarray(x)):
        ours = float32_to_bfloat16_bits(values)
        assert ours.shape == x.shape
        with np.errstate(invalid="ignore"):  # ml_dtypes warns on casting NaN
            theirs = x.astype(ml_dtypes.bfloat16).view(np.uint16)
        nan = np.isnan(x)
        np.testing.assert_array_equal(ours[~nan], theirs[~nan])
        want_nan = np.where(np.signbit(x[nan]), 0xFFC0, 0x7FC0)
        np.testing.assert_array_equal(ours[nan], want_nan)


def test_bfloat16_rounding_ties_to_even_and_keeps_specials() -> None:
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, np.inf, -np.inf, -0.0, 3.4e38], np.float32)
    bits = float32_to_bfloat16_bits(x)
    np.testing.assert_array_equal(bits[:5], [0x3F80, 0x3F82, 0x7F80, 0xFF80, 0x8000])
    assert bits[5] == 0x7F80  # rounds up past bfloat16's largest finite value


def test_bfloat16_nan_stays_nan_with_its_sign() -> None:
    x = np.array([np.nan, -np.nan], np.float32)
    bits = float32_to_bfloat16_bits(x)
    assert (bits & 0x7FFF > 0x7F80).all()
    assert bits[1] >> 15 == 1


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_shift_and_is_logical_and_the_same_on_numpy_and_paddle(dtype: type) -> None:
    x: np.ndarray = np.array([0, 1, -1, -268435456, 0x7FFFFFFF], dtype=np.int64).astype(dtype)
    for shift in (0, 4, 28):
        want = NumpyOps().shift_and(x, shift, 0xF)
        got = PaddleOps().shift_and(paddle.to_tensor(x), shift, 0xF).numpy()
        np.testing.assert_array_equal(got, want)
    assert NumpyOps().shift_and(np.array([-268435456], np.int32), 28, 0xF)[0] == 15


def test_lut_and_repeat_agree_on_numpy_and_paddle() -> None:
    table = np.arange(256, dtype=np.float32) / 3
    codes = np.arange(24, dtype=np.uint8).reshape(4, 6)
    n, p = NumpyOps(), PaddleOps()
    np.testing.assert_array_equal(
        p.lut(table, paddle.to_tensor(codes)).numpy(), n.lut(table, codes)
    )
    scales = table[:24].reshape(4, 6)
    np.testing.assert_array_equal(
        p.repeat(paddle.to_tensor(scales), 3, 1).numpy(), n.repeat(scales, 3, 1)
    )


def test_a_target_box_outside_the_logical_tensor_is_a_target_error(
    scaled_ckpt: Path, scaled_format: object
) -> None:
    ct = flexq.compose(scaled_ckpt)
    with pytest.raises(TargetError, match="does not fit the logical shape"):
        ct.plan("a", flexq.TargetSlice((3, 4), (2, 4), (2, 0), "float32"))


def test_quant_config_json_is_read_when_config_has_no_quantization_config(
    scaled_ckpt: Path,
) -> None:
    (scaled_ckpt / "quant_config.json").write_text(json.dumps({"w_bit": 4, "q_group_size": 128}))
    assert flexq.Checkpoint(scaled_ckpt).quantization_config == {"w_bit": 4, "q_group_size": 128}


@settings(max_examples=100, deadline=None)
@given(
    hnp.arrays(np.float32, st.integers(1, 64), elements=st.floats(width=32, allow_nan=True)),
    st.sampled_from(["bfloat16", "float32"]),
)
def test_device_rounding_gives_the_same_bits_as_numpy(x: np.ndarray, dtype: str) -> None:
    """The rounding used for tensors on a device, run here on CPU tensors."""
    from flexq.numerics.rounding import _round_on_device, round_numpy

    want = round_numpy(x, dtype)
    got = _round_on_device(paddle.to_tensor(x), dtype).numpy()
    np.testing.assert_array_equal(got.view(want.dtype), want)


def test_cpu_paddle_results_round_through_numpy() -> None:
    """Paddle 3.3.1's CPU float16 cast turns 1.75e-26 into a subnormal; flexq does not."""
    from flexq.formatkit.rounding import to_paddle

    # 65519.99 is the largest float32 that rounds to a finite float16 (65504).
    x = np.array([1.7543555e-26, 3e-7, np.nextafter(np.float32(65520), np.float32(0))], np.float32)
    assert paddle.to_tensor(x).astype("float16").numpy().view(np.uint16)[0] != 0
    got = to_paddle(x, "float16").numpy().view(np.uint16)
    np.testing.assert_array_equal(got, x.astype(np.float16).view(np.uint16))


def _overflowing() -> np.ndarray:
    """Float32 values of which three overflow float16 (65520 is the first that rounds to
    inf); an infinity (a non-finite scale's product) and a NaN are not overflows."""
    x = np.linspace(-60000, 60000, 3 * (1 << 18) + 5, dtype=np.float32)  # several chunks
    x[[7, 1 << 18, -1]] = [65520.0, -1e5, 3e38]
    x[[8, 9]] = [np.inf, np.nan]
    return x


@pytest.mark.parametrize("device", [False, True])
def test_float16_overflow_is_an_error_naming_the_count(device: bool) -> None:
    from flexq.numerics import rounding

    x = _overflowing()
    if device:
        with pytest.raises(rounding.Overflow) as raised:
            rounding._round_on_device(paddle.to_tensor(x), "float16")
    else:
        with pytest.raises(rounding.Overflow) as raised:
            rounding.round_numpy(x, "float16")
    assert raised.value.count == 3
    assert raised.value.largest == float(np.float32(3e38))


@pytest.mark.parametrize("device", [False, True])
def test_float16_overflow_saturates_when_asked(
    device: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flexq.numerics import rounding

    monkeypatch.setenv(rounding.OVERFLOW_ENV, "saturate")
    x = _overflowing()
    if device:
        got = rounding._round_on_device(paddle.to_tensor(x), "float16").numpy()
    else:
        got = rounding.round_numpy(x, "float16")
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    over = np.isfinite(x) & np.isinf(want)
    want[over] = np.copysign(np.float16(65504), x[over])
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert list(got[[7, 1 << 18, -1]]) == [65504, -65504, 65504]
    assert np.isinf(got[8])
    assert np.isnan(got[9])


def test_an_unknown_overflow_mode_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from flexq.numerics import rounding

    monkeypatch.setenv(rounding.OVERFLOW_ENV, "clip")
    with pytest.raises(flexq.FlexqError, match="FLEXQ_OVERFLOW='clip'.*'saturate'"):
        rounding.round_numpy(np.ones(4, np.float32), "float16")


@pytest.mark.parametrize("rows_scaled", [True, False])
def test_lut_mul_in_bands_equals_lookup_then_multiply(rows_scaled: bool) -> None:
    rng = np.random.default_rng(7)
    table = rng.standard_normal(256).astype(np.float32)
    table[5] = np.float32(3e38)  # products beyond float32 range are inf, no warning
    codes = rng.integers(0, 256, (2500, 2048), dtype=np.uint8)  # several bands of rows
    scale = rng.standard_normal((2500 if rows_scaled else 1, 16, 1)).astype(np.float32) * 4
    split = codes.reshape(2500, 16, 128)
    with np.errstate(over="ignore"):
        want = table[split] * scale
    got = NumpyOps().lut_mul(table, split, scale)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    small = codes[:3, :10]
    on_paddle = PaddleOps().lut_mul(table, paddle.to_tensor(small), paddle.to_tensor(scale[:1, 0]))
    np.testing.assert_array_equal(on_paddle.numpy(), NumpyOps().lut_mul(table, small, scale[:1, 0]))


@st.composite
def banded_cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    finite = st.floats(-8, 8, width=32)
    return draw(codes_and_scale(side=9, rank=4, scales=finite, band=40, fewer_scale_dims=True))


@examples(200)
@given(case=banded_cases())
def test_banded_lookup_equals_plain_lookup_for_any_shape_and_band_size(
    case: tuple[np.ndarray, np.ndarray, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small arrays, tiny bands: every split (runs of a dim, recursion into
    sub-arrays, odd-sized runs, threads) gives the bits of ``table[codes] * scale``."""
    import flexq.numerics.bands as ops_module

    codes, scale, band = case
    table = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    monkeypatch.setattr(ops_module, "_PAIR_MIN_CODES", 1)
    monkeypatch.setattr(ops_module, "_BAND_CODES", band)
    got = NumpyOps().lut_mul(table, codes, scale)
    looked_up = NumpyOps().lut(table, codes)
    into = np.full(codes.shape, 5.0, np.float32)
    filled = NumpyOps().lut_mul(table, codes, scale, out=into)
    want = table[codes] * scale
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(looked_up.view(np.uint32), table[codes].view(np.uint32))
    assert filled is into
    np.testing.assert_array_equal(into.view(np.uint32), want.view(np.uint32))


def _specials_table() -> np.ndarray:
    """256 float32 values with every rounding case: ties to even both ways, NaNs of both
    signs (one with a payload that would carry), infinities, signed zeros, the largest."""
    table = np.random.default_rng(5).standard_normal(256).astype(np.float32)
    bits = np.array(
        [0x3F808000, 0x3F818000, 0x7FC00001, 0xFFFFFFFF, 0x7F800000, 0xFF800000, 0x80000000,
         0x00000000, 0x7F7FFFFF, 0x00000001],
        np.uint32,
    )  # fmt: skip
    table[: bits.size] = bits.view(np.float32)
    return table


@examples(200)
@given(case=banded_cases())
def test_bands_rounded_in_cache_are_the_core_s_rounding_of_the_banded_float32(
    case: tuple[np.ndarray, np.ndarray, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any shape, tiny bands: rounding each band into bfloat16 as it is decoded gives the
    bits :func:`float32_to_bfloat16_bits` gives of the same float32 decoded whole, and
    writes nothing but ``rounded``."""
    import flexq.numerics.bands as bands

    codes, scale, band = case
    table = _specials_table()
    monkeypatch.setattr(bands, "_BAND_CODES", band)

    def work(c: np.ndarray, out: np.ndarray, s: np.ndarray) -> None:
        with np.errstate(over="ignore", invalid="ignore"):
            np.multiply(table[c], s, out=out)

    whole = bands.run_in_bands(work, codes, np.empty(codes.shape, np.float32), scale)
    rounded = np.full(codes.shape, 0xABCD, np.uint16)
    got = bands.run_in_bands_rounded(work, codes, rounded, scale)
    assert got is rounded
    np.testing.assert_array_equal(rounded, float32_to_bfloat16_bits(whole))


@examples(100)
@given(case=banded_cases())
def test_bands_rounded_two_values_per_code_are_the_core_s_rounding(
    case: tuple[np.ndarray, np.ndarray, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte of two 4-bit codes: ``work`` fills a float32 pair per code (one uint64 item),
    ``rounded`` holds a bfloat16 pair per code (one uint32 item), low value first."""
    import flexq.numerics.bands as bands

    codes, scale, band = case
    pairs = _specials_table()[np.arange(512) % 256].reshape(256, 2)[::-1].copy()
    items = pairs.view(np.uint64).reshape(256)
    monkeypatch.setattr(bands, "_BAND_CODES", band)

    def work(c: np.ndarray, out: np.ndarray, s: np.ndarray) -> None:
        out[...] = items[c]
        values = out.view(np.float32).reshape(*out.shape, 2)
        with np.errstate(over="ignore", invalid="ignore"):
            values *= s[..., None]

    whole = bands.run_in_bands(work, codes, np.empty(codes.shape, np.uint64), scale)
    rounded = np.full(codes.shape, 0xABCDABCD, np.uint32)
    assert bands.run_in_bands_rounded(work, codes, rounded, scale) is rounded
    want = float32_to_bfloat16_bits(whole.view(np.float32))
    np.testing.assert_array_equal(rounded.view(np.uint16), want)


def test_bands_write_into_a_0d_output() -> None:
    """A 0-d box is one band, its output a view (not the scalar ``out[()]`` would be)."""
    from flexq.numerics.bands import run_in_bands, run_in_bands_rounded

    def work(c: np.ndarray, out: np.ndarray) -> None:
        out[...] = np.float32(1.00390625)  # a tie: rounds to even, 1.0

    assert run_in_bands(work, np.array(3, np.uint8), np.zeros((), np.float32)) == 1.00390625
    rounded = run_in_bands_rounded(work, np.array(3, np.uint8), np.zeros((), np.uint16))
    assert int(rounded) == 0x3F80


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5), (2, 0, 4)])
def test_bands_rounded_take_an_empty_box(shape: tuple[int, ...]) -> None:
    """A zero-size box into a bfloat16 target: nothing to write, and no error (the NaN
    check of an empty band once asked numpy for the maximum of nothing)."""
    from flexq.numerics.bands import run_in_bands_rounded

    def work(c: np.ndarray, out: np.ndarray) -> None:
        out[...] = c

    rounded = np.zeros(shape, np.uint16)
    assert run_in_bands_rounded(work, np.zeros(shape, np.uint8), rounded) is rounded


def test_bands_rounded_refuse_a_rounded_array_unlike_the_codes() -> None:
    from flexq.formatkit import run_in_bands_rounded

    codes = np.zeros((4, 6), np.uint8)
    for bad in (np.zeros((4, 6), np.float32), np.zeros((6, 4), np.uint16),
                np.zeros((4, 12), np.uint16)[:, ::2]):  # fmt: skip
        with pytest.raises(ValueError, match="C-contiguous uint16"):
            run_in_bands_rounded(lambda c, o: None, codes, bad)


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float16", "float32", "bfloat16"])
def test_host_tensors_reach_numpy_without_a_copy(dtype: str) -> None:
    from flexq.formatkit.arrays import to_numpy

    t = paddle.arange(12, dtype="int32").astype(dtype).reshape([3, 4])
    got = to_numpy(t)
    want = t.numpy()  # Paddle's own copy (bfloat16 as uint16 bits)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    # shared: Paddle writes show through the numpy view
    t[0, 0] = 5
    assert int(np.asarray(t.astype("float32").numpy())[0, 0]) == 5
    assert got.view(np.uint8).tobytes() == t.numpy().view(np.uint8).tobytes()
    empty = to_numpy(paddle.zeros([0, 4], dtype=dtype))
    assert empty.shape == (0, 4)


@pytest.mark.parametrize("shape", [(), (1,), (2, 3)])
def test_bfloat16_bits_widen_in_every_rank(shape: tuple[int, ...]) -> None:
    """A per-tensor BF16 scale is 0-d; numpy 1.26 widens it too (no int64 promotion)."""
    bits = np.full(shape, 0x3FC0, dtype=np.uint16)
    np.testing.assert_array_equal(bfloat16_bits_to_float32(bits), np.full(shape, 1.5, np.float32))
