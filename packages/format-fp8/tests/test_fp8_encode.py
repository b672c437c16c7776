"""The E4M3 encoder and quantize(): exact RNE bytes, clamping, every layout's scales."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import flexq
from flexq import RawTensor
from flexq.formatkit import E4M3_TO_FLOAT32, E8M0_TO_FLOAT32
from flexq_fp8 import encode_e4m3, quantize, save_fp8_checkpoint


def ml_encode(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(x, np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


DECODE_VECTORS = {
    0x00: 0.0, 0x80: -0.0, 0x01: 2.0**-9, 0x07: 0.013671875, 0x08: 2.0**-6,
    0x38: 1.0, 0x40: 2.0, 0x7E: 448.0, 0xFE: -448.0,
}  # fmt: skip
ENCODE_VECTORS = [
    (460.0, 0x7E), (464.0, 0x7E), (465.0, 0x7F), (2.0**-10, 0x00), (1.5 * 2.0**-10, 0x01),
    (-0.0, 0x80), (1.0, 0x38), (-448.0, 0xFE), (np.inf, 0x7F), (-np.inf, 0xFF),
]  # fmt: skip


def test_decode_table_matches_formats_md_vectors_and_ml_dtypes() -> None:
    for code, value in DECODE_VECTORS.items():
        assert E4M3_TO_FLOAT32[code] == value
        assert np.signbit(E4M3_TO_FLOAT32[code]) == np.signbit(value)
    assert np.isnan(E4M3_TO_FLOAT32[[0x7F, 0xFF]]).all()
    ref = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    np.testing.assert_array_equal(E4M3_TO_FLOAT32.view(np.uint32), ref.view(np.uint32))


def test_e8m0_table_is_two_to_the_code_minus_127_with_nan_at_255() -> None:
    ref = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    np.testing.assert_array_equal(E8M0_TO_FLOAT32.view(np.uint32), ref.view(np.uint32))
    assert E8M0_TO_FLOAT32[0] == np.float32(2.0**-127)
    assert E8M0_TO_FLOAT32[127] == 1.0


@pytest.mark.parametrize(("value", "code"), ENCODE_VECTORS)
def test_encoder_matches_formats_md_vectors(value: float, code: int) -> None:
    assert encode_e4m3(np.array([value], np.float32))[0] == code


def test_encoder_is_bit_exact_with_ml_dtypes_on_random_bit_patterns() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2**32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    np.testing.assert_array_equal(encode_e4m3(x), ml_encode(x))


def test_encoder_is_bit_exact_at_every_rounding_boundary() -> None:
    # every midpoint between neighbouring E4M3 values, and one float32 ulp either side
    values = np.unique(np.abs(E4M3_TO_FLOAT32[np.isfinite(E4M3_TO_FLOAT32)]))
    mids = ((values[:-1].astype(np.float64) + values[1:]) / 2).astype(np.float32)
    near = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf), values])
    x = np.concatenate([near, -near, np.array([464.0, 465.0, 2.0**-10, 0.0], np.float32)])
    np.testing.assert_array_equal(encode_e4m3(x), ml_encode(x))


def test_encoder_round_trips_every_finite_code() -> None:
    codes = np.arange(256, dtype=np.uint8)
    finite = np.isfinite(E4M3_TO_FLOAT32)
    np.testing.assert_array_equal(encode_e4m3(E4M3_TO_FLOAT32[finite]), codes[finite])


def expand(scale: np.ndarray, block: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    index = np.ix_(*[np.arange(n) // b for n, b in zip(shape, block, strict=True)])
    return scale.reshape([-(-n // b) for n, b in zip(shape, block, strict=True)])[index]


# (layout, block_size argument, block it means for a 300x260 weight, stored scale shape, suffix)
LAYOUTS: list[tuple[str, Any, tuple[int, int], tuple[int, ...], str]] = [
    ("tensor", None, (300, 260), (), "_scale"),
    ("channel", None, (1, 260), (300, 1), "_scale"),
    ("group", 32, (1, 32), (300, 9), "_scale"),
    ("block", None, (128, 128), (3, 3), "_scale_inv"),
    ("block", (64, 96), (64, 96), (5, 3), "_scale_inv"),
]


@pytest.mark.parametrize("scale_dtype", ["F32", "BF16", "F16", "F8_E8M0", "U8"])
@pytest.mark.parametrize(("layout", "size", "block", "stored", "suffix"), LAYOUTS)
def test_quantize_clamps_rounds_to_nearest_even_and_stores_the_layouts_scale(
    layout: Any,
    size: Any,
    block: tuple[int, int],
    stored: tuple[int, ...],
    suffix: str,
    scale_dtype: Any,
) -> None:
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((300, 260)) * rng.uniform(0.01, 10, (300, 1))).astype(np.float32)
    w[0, :4] = [0.0, 1e-30, -1e-30, 0.0]  # tiny values land on subnormals or zero
    parts = quantize(w, layout=layout, block_size=size, scale_dtype=scale_dtype, key="x.weight")
    assert set(parts) == {"x.weight", "x.weight" + suffix}
    q, s = parts["x.weight"], parts["x.weight" + suffix]
    assert q.dtype == "F8_E4M3"
    assert q.data.shape == (300, 260)
    assert s.dtype == scale_dtype
    assert s.data.shape == stored
    scale = {
        "BF16": lambda d: d.view(ml_dtypes.bfloat16),
        "U8": lambda d: d.view(ml_dtypes.float8_e8m0fnu),
        "F8_E8M0": lambda d: d.view(ml_dtypes.float8_e8m0fnu),
    }.get(scale_dtype, lambda d: d)(s.data).astype(np.float32)
    full = expand(scale, block, w.shape)
    # the clamp keeps every finite input finite (no 0x7F / 0xFF)
    assert not np.isin(q.data, [0x7F, 0xFF]).any()
    np.testing.assert_array_equal(q.data, ml_encode(np.clip(w / full, -448.0, 448.0)))
    # error bound of a 3-bit mantissa: half an ulp relative, or half a subnormal step
    deq = q.data.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * full
    assert (np.abs(deq - w) <= np.abs(w) * 2.0**-4 + full * 2.0**-10).all()
    if scale_dtype in ("F8_E8M0", "U8"):
        amax = np.abs(w).max()
        assert (np.log2(scale) == np.round(np.log2(scale))).all()
        assert scale.max() <= 2 * amax / 448


def test_quantize_gives_each_expert_its_own_scale_grid() -> None:
    w = np.stack([np.full((200, 136), v, np.float32) for v in (1.0, 100.0)])
    parts = quantize(w, layout="block", key="experts.gate_up_proj")
    scale = parts["experts.gate_up_proj_scale_inv"]
    assert scale.data.shape == (2, 2, 2)
    np.testing.assert_array_equal(scale.data[0], np.full((2, 2), 1 / 448, np.float32))
    np.testing.assert_array_equal(scale.data[1], np.full((2, 2), 100 / 448, np.float32))
    assert (parts["experts.gate_up_proj"].data == 0x7E).all()  # amax maps to 448


def test_all_zero_block_gets_scale_one() -> None:
    parts = quantize(np.zeros((4, 4), np.float32), layout="tensor")
    assert parts["weight_scale"].data.tolist() == 1.0
    assert (parts["weight"].data == 0).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"layout": "rows"}, "unknown FP8 layout"),
        ({"layout": "block", "block_size": 128}, "block layout takes"),
        ({"layout": "group", "block_size": (1, 32)}, "group layout takes"),
        ({"scale_dtype": "I8"}, "unknown scale dtype"),
    ],
)
def test_quantize_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        quantize(np.ones((4, 4), np.float32), **kwargs)


@pytest.mark.parametrize(
    ("layout", "producer", "method"),
    [
        ("tensor", None, "fp8"),
        ("block", None, "fp8"),
        ("channel", None, "fbgemm_fp8"),
        ("group", None, "compressed-tensors"),
        ("block", "compressed-tensors", "compressed-tensors"),
        ("channel", "compressed-tensors", "compressed-tensors"),
        ("tensor", "compressed-tensors", "compressed-tensors"),
    ],
)
def test_saved_checkpoint_carries_its_producers_config_and_loads_back(
    tmp_path: Path,
    layout: Any,
    producer: Any,
    method: str,
    reference: Callable[..., np.ndarray],
) -> None:
    rng = np.random.default_rng(9)
    weights = {
        "model.layers.0.mlp.down_proj.weight": rng.standard_normal((300, 260)).astype(np.float32),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((72, 40)).astype(np.float32),
    }
    head = RawTensor("BF16", np.full((8, 4), 0x3F80, np.uint16))
    save_fp8_checkpoint(
        tmp_path,
        weights,
        layout=layout,
        block_size=64 if layout == "group" else None,
        scale_dtype="BF16",
        producer=producer,
        others={"lm_head.weight": head},
        ignored=["lm_head"],
        shard_of={"lm_head.weight": 1},
    )
    ct = flexq.compose(tmp_path, formats=["fp8"])
    assert ct.checkpoint.quantization_config["quant_method"] == method
    assert ct.entries["lm_head.weight"].is_passthrough
    for key, w in weights.items():
        parts = quantize(
            w, layout=layout, block_size=64 if layout == "group" else None, scale_dtype="BF16"
        )
        assert ct.entries[key].owner == "fp8"
        (scale_key,) = (k for k in ct.source_keys(key) if k != key)
        assert scale_key == key + (
            "_scale_inv" if (layout, method) == ("block", "fp8") else "_scale"
        )
        codes = ct.checkpoint.read(key)
        np.testing.assert_array_equal(codes, parts["weight"].data)
        scale = RawTensor(ct.checkpoint.info(scale_key).dtype, ct.checkpoint.read(scale_key))
        block = {"tensor": w.shape, "channel": (1, w.shape[1]), "group": (1, 64)}.get(
            layout, (128, 128)
        )
        want = reference(codes, scale, block)
        np.testing.assert_array_equal(ct.load(key, "float32").view(np.uint32), want.view(np.uint32))
        assert np.abs(want - w).max() <= np.abs(w).max() / 8


def test_producer_that_does_not_write_a_layout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="producer 'fbgemm' does not write the 'block' layout"):
        save_fp8_checkpoint(
            tmp_path, {"a.weight": np.ones((4, 4), np.float32)}, layout="block", producer="fbgemm"
        )
