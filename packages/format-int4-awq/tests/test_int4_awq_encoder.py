"""The encoder: AutoAWQ's zero-point math, its layouts, and round trips through the decoder."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flexq import compose, save_checkpoint
from flexq_int4_awq import quantization_config, quantize
from flexq_int4_awq.encode import quantize_codes


def autoawq_reference(w: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pseudo_quantize_tensor, one group at a time with float32 scalars and the F16 scale."""
    out_f, in_f = w.shape
    q = np.zeros((out_f, in_f), dtype=np.int64)
    z = np.zeros((out_f, in_f // g), dtype=np.int64)
    s = np.zeros((out_f, in_f // g), dtype=np.float16)
    for o in range(out_f):
        for k in range(in_f // g):
            grp = w[o, k * g : (k + 1) * g]
            span = max(np.float32(grp.max() - grp.min()), np.float32(1e-5))
            s[o, k] = np.float16(np.float32(span) / np.float32(15))
            scale = np.float32(s[o, k])
            z[o, k] = min(max(-np.round(np.float32(grp.min()) / scale), 0), 15)
            for i, x in enumerate(grp):
                q[o, k * g + i] = min(max(np.round(np.float32(x) / scale) + z[o, k], 0), 15)
    return q, z, s


def test_hand_computed_group_gives_autoawq_codes() -> None:
    q, z, s = quantize_codes(np.array([[-1.0, 0.0, 0.5, 2.0]], dtype=np.float32), 4)
    # s = 3/15 -> F16 0.199951171875; z = -round(-1/s) = 5; q = round(w/s) + 5.
    assert s.dtype == np.float16
    assert float(s[0, 0]) == 0.199951171875
    assert z.tolist() == [[5]]
    assert q.tolist() == [[0, 5, 8, 15]]


def test_constant_group_uses_the_minimum_scale() -> None:
    q, z, s = quantize_codes(np.full((1, 8), 3.0, dtype=np.float32), 8)
    assert float(s[0, 0]) == float(np.float16(np.float32(1e-5) / np.float32(15)))
    assert z.tolist() == [[0]]
    assert q.tolist() == [[15] * 8]  # clamped: 3 / 6.7e-7 is far above 15


@pytest.mark.parametrize(("group", "in_f"), [(8, 32), (16, 48), (32, 64), (-1, 24)])
def test_codes_match_the_autoawq_reference(group: int, in_f: int, rng: np.random.Generator) -> None:
    w = (rng.standard_normal((16, in_f)) * rng.uniform(0.01, 2)).astype(np.float32)
    g = in_f if group == -1 else group
    q, z, s = quantize_codes(w, g)
    rq, rz, rs = autoawq_reference(w, g)
    np.testing.assert_array_equal(q, rq)
    np.testing.assert_array_equal(z, rz)
    np.testing.assert_array_equal(s.view(np.uint16), rs.view(np.uint16))


@pytest.mark.parametrize(
    ("version", "out_f", "in_f", "group"),
    [("gemm", 24, 64, 16), ("gemm", 16, 40, -1), ("gemv", 24, 128, 32), ("gemv", 8, 192, 64)],
)
def test_encoded_checkpoint_decodes_to_the_reference_dequantization(
    version: str,
    out_f: int,
    in_f: int,
    group: int,
    oracle: Any,
    tmp_path: Any,
    rng: np.random.Generator,
) -> None:
    w = rng.standard_normal((out_f, in_f)).astype(np.float32)
    g = in_f if group == -1 else group
    tensors = quantize(w, group, version, prefix="fc")
    assert tensors["fc.qweight"].dtype == "I32"
    assert tensors["fc.qzeros"].dtype == "I32"
    assert tensors["fc.scales"].dtype == "F16"
    if version == "gemm":
        assert tensors["fc.qweight"].data.shape == (in_f, out_f // 8)
        assert tensors["fc.scales"].data.shape == (in_f // g, out_f)
    else:
        width = oracle.gemv_width(in_f // g, g)
        assert tensors["fc.qweight"].data.shape == (out_f, in_f // 8)
        assert tensors["fc.qzeros"].data.shape == (out_f, width)
        assert not tensors["fc.scales"].data[:, in_f // g :].any()
    rq, rz, rs = autoawq_reference(w, g)
    want = ((rq - np.repeat(rz, g, axis=1)) * np.repeat(rs.astype(np.float32), g, axis=1)).astype(
        np.float32
    )
    decoded = oracle.reference_decode(
        version,
        tensors["fc.qweight"].data,
        tensors["fc.qzeros"].data,
        tensors["fc.scales"].data,
        group,
    )
    oracle.same_bits(decoded, want)
    path = save_checkpoint(
        tmp_path / "enc",
        tensors,
        config={"quantization_config": quantization_config(group, version)},
    )
    oracle.same_bits(compose(path, ["int4-awq"]).load("fc.weight", "float32"), want)
    # Rounding to the nearest level of a range-covering grid: within one step of w.
    assert (np.abs(want - w) <= np.repeat(rs.astype(np.float32), g, axis=1)).all()


def test_bare_keys_without_prefix() -> None:
    tensors = quantize(np.zeros((8, 8), dtype=np.float32), -1)
    assert set(tensors) == {"qweight", "qzeros", "scales"}


@pytest.mark.parametrize(
    ("shape", "group", "version", "message"),
    [
        ((8, 30), 16, "gemm", "not a positive multiple"),
        ((12, 32), 16, "gemm", "GEMM packs out_features in eights"),
        ((8, 32), 16, "gemv", "GEMV needs"),
        ((8, 32), 16, "marlin", "version must be"),
        ((8,), 16, "gemm", "2-D"),
    ],
)
def test_encoder_rejects_what_the_layout_cannot_hold(
    shape: tuple[int, ...], group: int, version: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        quantize(np.zeros(shape, dtype=np.float32), group, version)


def test_encoder_rejects_non_finite_weights_and_float16_overflow() -> None:
    w = np.zeros((8, 8), dtype=np.float32)
    w[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        quantize(w, -1)
    w[0, 0], w[0, 1] = 1e7, -1e7
    with pytest.raises(ValueError, match="too large for a float16 scale"):
        quantize(w, -1)
