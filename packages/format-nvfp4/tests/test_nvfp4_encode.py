"""The encoder: E4M3 / E2M1 rounding against ml_dtypes, round trips, flexq_encode."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import flexq
from flexq.formatkit import E4M3_TO_FLOAT32
from flexq_nvfp4 import plugin, quantize, quantize_array
from flexq_nvfp4.encode import e2m1_codes, e4m3_codes

CT, MO = "compressed-tensors", "modelopt"
Build = Callable[..., Path]


def test_e4m3_codes_match_ml_dtypes_on_every_value_and_every_midpoint() -> None:
    values = E4M3_TO_FLOAT32[:0x7F].astype(np.float64)  # 0 .. 448
    mids = (values[:-1] + values[1:]) / 2  # ties: round to the even code
    probe = np.concatenate([values, mids, -values, -mids, [2.0**-10, 1.5 * 2.0**-10]])
    want = probe.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(e4m3_codes(probe), want)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-448, 448, width=32), min_size=1, max_size=64))
def test_e4m3_codes_match_ml_dtypes_on_random_values(xs: list[float]) -> None:
    x = np.array(xs, np.float32)
    np.testing.assert_array_equal(e4m3_codes(x), x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))


def test_e2m1_codes_round_ties_to_even_and_saturate() -> None:
    probe = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.25, -5.0, 0.26, -0.0])
    want = probe.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    np.testing.assert_array_equal(e2m1_codes(probe), want)


@settings(max_examples=40, deadline=None)
@given(
    layout=st.sampled_from([CT, MO]),
    x=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=40).map(
            lambda s: (*s[:-1], 2 * s[-1])
        ),
        elements=st.floats(-1e3, 1e3, width=32),
    ),
)
def test_round_trip_error_is_within_one_effective_scale(layout: str, x: np.ndarray) -> None:
    packed, scales, glob = quantize_array(x, layout)  # type: ignore[arg-type]
    s = E4M3_TO_FLOAT32[scales]
    eff = s / glob if layout == CT else s * glob
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*x.shape[:-1], -1)
    elems = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    spread = np.repeat(eff, 16, axis=-1)[..., : x.shape[-1]]
    back = elems * spread
    assert np.isfinite(back).all()
    # The largest gap of the E2M1 grid is 2 (between 4 and 6): half of it, times the
    # block's scale, bounds the rounding error. A block scale rounded down (coarsely, for
    # E4M3 subnormals) may leave values past 6 * scale: those saturate at 6 * scale.
    allowed = spread + np.maximum(np.abs(x) - 6 * spread, 0)
    assert (np.abs(back - x) <= allowed * (1 + 1e-6)).all()


def test_zero_tensor_round_trips_to_zeros() -> None:
    for layout in (CT, MO):
        packed, scales, glob = quantize_array(np.zeros((2, 32), np.float32), layout)  # type: ignore[arg-type]
        assert (packed == 0).all()
        assert np.isfinite(E4M3_TO_FLOAT32[scales]).all()
        assert np.isfinite(glob)


@pytest.mark.parametrize("layout", [CT, MO])
def test_quantized_tensors_load_back_through_flexq(
    tmp_path: Path, build: Build, layout: str
) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((12, 80)) * np.logspace(-3, 1, 80)).astype(np.float32)
    tensors = quantize({"model.layers.0.mlp.up_proj.weight": x}, layout=layout)  # type: ignore[arg-type]
    names = {
        CT: {".weight_packed": "U8", ".weight_scale": "F8_E4M3", ".weight_global_scale": "F32"},
        MO: {".weight": "U8", ".weight_scale": "F8_E4M3", ".weight_scale_2": "F32"},
    }[layout]
    assert {
        k.removeprefix("model.layers.0.mlp.up_proj"): t.dtype for k, t in tensors.items()
    } == names
    ct = flexq.compose(build(tmp_path / "c", tensors), ["nvfp4"])
    back = ct.load("model.layers.0.mlp.up_proj.weight", "float32")
    assert np.abs(back - x).max() <= np.abs(x).max() / 6


def test_quantize_rejects_what_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="shape"):
        quantize({"m.weight": np.zeros((2, 3), np.float32)})
    with pytest.raises(ValueError, match="X.weight"):
        quantize({"m.bias": np.zeros((2, 4), np.float32)})
    with pytest.raises(ValueError, match="layout"):
        quantize({"m.weight": np.zeros((2, 4), np.float32)}, layout="gguf")  # type: ignore[arg-type]


def test_flexq_encode_writes_what_llm_compressor_writes(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    weights = {
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((8, 32)).astype(np.float32)
    }
    others = {"model.norm.weight": flexq.RawTensor("F32", np.ones(8, np.float32))}
    assert plugin.plugin.flexq_encode(tmp_path, weights, others) == plugin.MIN_LOGITS_COSINE
    qc = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert qc["format"] == "nvfp4-pack-quantized"
    assert qc["config_groups"]["group_0"]["weights"]["strategy"] == "tensor_group"
    ct = flexq.compose(tmp_path)
    assert {k: e.owner for k, e in ct.entries.items()} == {
        "model.layers.0.self_attn.q_proj.weight": "nvfp4",
        "model.norm.weight": "passthrough",
    }
