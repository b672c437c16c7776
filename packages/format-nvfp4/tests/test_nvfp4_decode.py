"""The NVFP4 math: worked examples, the reference decoder, special values, the real producer."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flexq
from flexq.formatkit.rounding import float32_to_bfloat16_bits
from flexq.testing.strategies import examples
from flexq_nvfp4 import decode

CT, MO, AR = "compressed-tensors", "modelopt", "auto-round"
FORMATS = ["nvfp4"]
Build = Callable[..., Path]
RefDecode = Callable[[str, np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]
KEY = "model.layers.0.mlp.down_proj"
DATA = Path(__file__).parent / "data"
Nv = Callable[..., dict[str, flexq.RawTensor]]
RandomNv = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]


def bits(x: Any) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def assert_same(got: Any, want: np.ndarray) -> None:
    """Bit for bit, except that any NaN matches any NaN (payloads are not values)."""
    got = np.asarray(got, dtype=np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(bits(got)[~nan], bits(want)[~nan])


def load(path: Path, key: str, dtype: str = "float32") -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flexq.ScaleWarning)
        return np.asarray(flexq.compose(path, formats=FORMATS).load(key, dtype))


def one_block(packed: list[int], scale: int, glob: float) -> tuple[np.ndarray, ...]:
    p = np.zeros((1, 8), np.uint8)
    p[0, : len(packed)] = packed
    return p, np.array([[scale]], np.uint8), np.array([glob], np.float32)


@pytest.mark.parametrize(
    ("producer", "want"),
    [(CT, [0.25, 0.5, 3.0, -3.0]), (MO, [1.0, 2.0, 12.0, -12.0])],
)
def test_worked_example_low_nibble_first(
    tmp_path: Path, build: Build, nv: Nv, producer: str, want: list[float]
) -> None:
    # 0x21: element 0 = code 1 (0.5), element 1 = code 2 (1.0); 0xF7: 6, -6.
    # Scale 0x38 is 1.0; the global scale 2 divides (compressed-tensors) or multiplies (ModelOpt).
    path = build(tmp_path / "c", nv(producer, KEY, *one_block([0x21, 0xF7], 0x38, 2.0)))
    out = load(path, KEY + ".weight")
    np.testing.assert_array_equal(out[0, :4], want)
    np.testing.assert_array_equal(out[0, 4:], 0.0)


def test_code_8_is_negative_zero_for_compressed_tensors_and_positive_for_modelopt(
    tmp_path: Path, build: Build, nv: Nv
) -> None:
    # compressed-tensors decodes code 8 as 0 * -1 = -0.0; ModelOpt's table has +0 there.
    block = one_block([0x88] * 8, 0x38, 1.0)
    ct = load(build(tmp_path / "ct", nv(CT, KEY, *block)), KEY + ".weight")
    mo = load(build(tmp_path / "mo", nv(MO, KEY, *block)), KEY + ".weight")
    assert (bits(ct) == 0x80000000).all()
    assert (bits(mo) == 0).all()


def test_effective_scale_is_rounded_before_the_product(
    tmp_path: Path, build: Build, nv: Nv, configs: dict[str, Any]
) -> None:
    # compressed-tensors forms float32(s / g) first: element 1.5 (code 3), s = 1.125 (0x39),
    # g = 5 gives 1.5 * float32(0.225) = 0.33749998, not (1.5 * 1.125) / 5 = 0.3375 nor
    # s * float32(1 / g) * 1.5 = 0.3375.
    path = build(tmp_path / "c", nv(CT, KEY, *one_block([0x03], 0x39, 5.0)))
    out = load(path, KEY + ".weight")
    assert out[0, 0] == np.float32(0.33749998)
    assert out[0, 0] != np.float32(0.3375)
    # ModelOpt forms float32(s * g2) first: the same block with g2 = 0.2.
    path = build(tmp_path / "m", nv(MO, KEY, *one_block([0x03], 0x39, 0.2)))
    eff = np.float32(1.125) * np.float32(0.2)
    assert bits(load(path, KEY + ".weight")[0, 0]) == bits(np.float32(1.5) * eff)
    # auto-round forms float32(e2m1 * float32(1 / g)) first, then times s.
    path = build(tmp_path / "a", nv(AR, KEY, *one_block([0x03], 0x39, 5.0)), configs[AR])
    r = np.float32(1.0) / np.float32(5.0)
    out = load(path, KEY + ".weight")
    assert bits(out[0, 0]) == bits((np.float32(1.5) * r) * np.float32(1.125))
    assert out[0, 0] == np.float32(0.3375)


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "producer": draw(st.sampled_from([CT, MO, AR])),
        "lead": tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))),
        "n": draw(st.integers(1, 40)) * 2,
        "seed": draw(st.integers(0, 2**32 - 1)),
        "glob": draw(
            st.one_of(
                st.floats(2.0**-100, 2.0**100, width=32),
                st.sampled_from([0.0, 1.0, 2688.0, float(np.finfo(np.float32).tiny), 1e-45]),
            )
        ),
    }


@examples(80)
@given(case=cases())
def test_decode_matches_the_reference_decoder(
    case: dict[str, Any],
    build: Build,
    nv: Nv,
    ref_decode: RefDecode,
    random_nv_data: RandomNv,
    configs: dict[str, Any],
) -> None:
    rng = np.random.default_rng(case["seed"])
    packed, scales, _ = random_nv_data(rng, case["lead"], case["n"])
    glob = np.array([case["glob"]], np.float32)
    want = ref_decode(case["producer"], packed, scales, glob, case["n"])
    with tempfile.TemporaryDirectory() as tmp:
        tensors = nv(case["producer"], KEY, packed, scales, glob)
        path = build(Path(tmp) / "c", tensors, configs[case["producer"]])
        assert_same(load(path, KEY + ".weight"), want)
        got16 = load(path, KEY + ".weight", "bfloat16")
        nan = np.isnan(want)
        np.testing.assert_array_equal(got16[~nan], float32_to_bfloat16_bits(want)[~nan])
        # The device path: the same operations as Paddle ops, bit for bit.
        ct = flexq.compose(path, formats=FORMATS)
        target = flexq.TargetSlice.whole(want.shape, "float32")
        plan = ct.plan(KEY + ".weight", target)
        sources = ct.read_sources(plan)
        on_device = {k: paddle.to_tensor(v) for k, v in sources.items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flexq.ScaleWarning)
            got = ct.decode(KEY + ".weight", on_device, plan, "float32")
        assert_same(got.numpy(), want)
        ct.checkpoint.close()


@pytest.mark.parametrize("quad_min_bytes", [0, 1 << 40])
def test_large_tensor_takes_the_banded_path_and_matches_the_reference(
    tmp_path: Path,
    build: Build,
    nv: Nv,
    ref_decode: RefDecode,
    random_nv_data: RandomNv,
    configs: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    quad_min_bytes: int,
) -> None:
    # Both lookups of the banded path: four elements per uint16 (auto-round builds its
    # per-tensor table only above a size) and two per byte.
    monkeypatch.setattr(decode, "_QUAD_MIN_BYTES", quad_min_bytes)
    rng = np.random.default_rng(3)
    for producer in (CT, MO, AR):
        packed, scales, glob = random_nv_data(rng, (300,), 1024)
        tensors = nv(producer, KEY, packed, scales, glob)
        path = build(tmp_path / producer, tensors, configs[producer])
        assert_same(load(path, KEY + ".weight"), ref_decode(producer, packed, scales, glob, 1024))


def test_nan_scale_code_warns_and_makes_its_block_nan(tmp_path: Path, build: Build, nv: Nv) -> None:
    packed = np.full((2, 16), 0x22, np.uint8)
    scales = np.array([[0x38, 0x7F], [0xFF, 0x38]], np.uint8)
    path = build(tmp_path / "c", nv(CT, KEY, packed, scales, np.array([1.0], np.float32)))
    with pytest.warns(flexq.ScaleWarning, match=r"weight_scale.*\[0, 1\]"):
        out = flexq.compose(path, formats=FORMATS).load(KEY + ".weight", "float32")
    np.testing.assert_array_equal(np.isnan(out), np.repeat([[0, 1], [1, 0]], 16, axis=1) == 1)
    np.testing.assert_array_equal(out[0, :16], 1.0)


def test_zero_global_scale_gives_infinities_for_compressed_tensors_and_zeros_otherwise(
    tmp_path: Path, build: Build, nv: Nv, configs: dict[str, Any]
) -> None:
    # compressed-tensors divides by g: s / 0 = inf, and a zero element times inf is NaN.
    block = one_block([0x20, 0x00], 0x38, 0.0)
    with pytest.warns(flexq.ScaleWarning, match="non-finite"):
        ct = flexq.compose(build(tmp_path / "ct", nv(CT, KEY, *block)), formats=FORMATS).load(
            KEY + ".weight", "float32"
        )
    assert ct[0, 1] == np.inf
    assert np.isnan(ct[0, 0])
    mo = load(build(tmp_path / "mo", nv(MO, KEY, *block)), KEY + ".weight")
    np.testing.assert_array_equal(mo, 0.0)
    # auto-round's reciprocal of a zero global scale is 0 (its get_reciprocal).
    ar = load(build(tmp_path / "ar", nv(AR, KEY, *block), configs[AR]), KEY + ".weight")
    np.testing.assert_array_equal(ar, 0.0)


def test_e4m3_subnormal_scales_decode_exactly(tmp_path: Path, build: Build, nv: Nv) -> None:
    scales = np.arange(1, 9, dtype=np.uint8).reshape(1, 8)  # 2^-9 .. 8 * 2^-9 (= 2^-6)
    packed = np.full((1, 64), 0x22, np.uint8)  # every element 1.0
    path = build(tmp_path / "c", nv(MO, KEY, packed, scales, np.array([1.0], np.float32)))
    out = load(path, KEY + ".weight")
    np.testing.assert_array_equal(out[0, ::16], np.arange(1, 9) * 2.0**-9)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["llmcompressor-nvfp4a16", "autoround-nvfp4", "modelopt-nvfp4"])
def test_real_producer_checkpoints_are_bit_exact_against_their_dequantizers(
    name: str, dtype: str
) -> None:
    """tests/data: two linears of a random tiny Llama quantized by a real producer, and the
    producer's own dequantization of them (see the README beside them)."""
    expected = np.load(DATA / name / "expected.npz")
    ct = flexq.compose(DATA / name, formats=FORMATS)
    assert {k for k, e in ct.entries.items() if e.owner == "nvfp4"} == {
        k.split("|")[0] for k in expected.files
    }
    for entry in expected.files:
        key, kind = entry.split("|")
        if kind != dtype:
            continue
        got = np.asarray(ct.load(key, dtype))
        want = expected[entry]
        np.testing.assert_array_equal(got.view(want.dtype), want)


@pytest.mark.parametrize(("producer", "glob"), [(CT, 1e-38), (MO, 1e37)])
def test_an_effective_scale_beyond_float32_warns_naming_the_block_scale_and_the_global(
    tmp_path: Path, build: Build, nv: Nv, producer: str, glob: float
) -> None:
    # 448 / 1e-38 and 448 * 1e37 are beyond float32 although both scales are finite.
    block = one_block([0x20, 0x00], 0x7E, glob)  # 0x7E: E4M3 448
    path = build(tmp_path / producer, nv(producer, KEY, *block))
    global_key = KEY + (".weight_global_scale" if producer == CT else ".weight_scale_2")
    with pytest.warns(flexq.ScaleWarning) as record:
        out = flexq.compose(path, formats=FORMATS).load(KEY + ".weight", "float32")
    assert len(record) == 1
    message = str(record[0].message)
    assert f"'{KEY}.weight_scale': scale inf at [0, 0]" in message
    assert f"global scale '{global_key}'" in message
    assert not np.isfinite(out[0, 1])
