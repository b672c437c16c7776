"""The device path: Paddle tensors through the same dequantize code give the same bits as numpy.

Sources are converted the way the load pipeline ships them (F8 and E8M0 as
uint8, BF16 as bfloat16) with the kit's ``source_to_paddle``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import paddle
import pytest

import flexq
from flexq import RawTensor, TargetSlice
from flexq.formatkit.arrays import to_numpy
from flexq.formatkit.rounding import OVERFLOW_ENV
from flexq.testing import decode_box, source_to_paddle


def bits_with_one_nan(x: np.ndarray, out: str) -> np.ndarray:
    """Bit patterns with every NaN replaced by one marker.

    The float32 products are bit-identical on both paths (NaN payloads
    included); the core's one rounding step differs for NaN only: Paddle's
    float32 -> bfloat16 cast writes 0x7FFF for every NaN, numpy keeps the sign.
    """
    if out == "float32":
        return x.view(np.uint32)
    bits = x.view(np.uint16)
    nan = (bits & 0x7FFF) > (0x7F80 if out == "bfloat16" else 0x7C00)
    return np.where(nan, np.uint16(0x7FFF), bits)


#: (weight shape, block, scale dtype, stored scale shape or None for the grid)
Layout = tuple[tuple[int, ...], tuple[int, ...], str, tuple[int, ...] | None]
LAYOUTS: list[Layout] = [
    ((300, 260), (128, 128), "BF16", None),
    ((300, 260), (128, 128), "U8", None),
    ((300, 260), (64, 32), "F8_E8M0", None),
    ((300, 260), (300, 260), "F32", ()),
    ((300, 260), (1, 260), "F32", None),
    ((300, 260), (1, 32), "F16", None),
    ((3, 200, 136), (1, 128, 128), "F32", None),
    # columns that are whole blocks take the reshape-and-broadcast branch
    ((3, 130, 192), (1, 64, 64), "BF16", None),
]


def build(
    path: Path,
    layout: Layout,
    make_codes: Callable[..., np.ndarray],
    make_scale: Callable[..., RawTensor],
) -> flexq.ComposedTransform:
    shape, block, scale_dtype, stored = layout
    rng = np.random.default_rng(3)
    grid = [-(-n // b) for n, b in zip(shape, block, strict=True)]
    scale = make_scale(rng, grid, scale_dtype)
    if stored is not None:
        scale = RawTensor(scale.dtype, scale.data.reshape(stored))
    qc = {"quant_method": "fp8", "weight_block_size": list(block[-2:])}
    flexq.save_checkpoint(
        path,
        {"w": RawTensor("F8_E4M3", make_codes(rng, shape)), "w_scale": scale},
        config={"quantization_config": qc},
    )
    return flexq.compose(path, formats=["fp8"])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("out", ["float32", "bfloat16", "float16"])
def test_paddle_sources_give_the_numpy_bits_for_local_and_global_plans(
    tmp_path: Path,
    layout: Layout,
    out: str,
    make_codes: Callable[..., np.ndarray],
    make_scale: Callable[..., RawTensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Random E8M0 scales reach far beyond float16: both paths clamp them alike.
    monkeypatch.setenv(OVERFLOW_ENV, "saturate")
    ct = build(tmp_path, layout, make_codes, make_scale)
    shape = layout[0]
    # a box that starts and ends inside blocks (and skips the first expert)
    offset = (1,) * (len(shape) - 2) + (70, 100)
    local = (2,) * (len(shape) - 2) + (min(150, shape[-2] - 70), min(131, shape[-1] - 100))
    for target in (
        TargetSlice(shape, local, offset, out),
        TargetSlice.whole(shape, out),
    ):
        box = (target.global_offset, target.local_shape)
        from_numpy = decode_box(ct, "w", *box, out)
        from_paddle = decode_box(ct, "w", *box, out, paddle=True)
        assert isinstance(from_paddle, paddle.Tensor)
        assert str(from_paddle.dtype) == f"paddle.{out}"
        np.testing.assert_array_equal(
            bits_with_one_nan(to_numpy(from_paddle), out), bits_with_one_nan(from_numpy, out)
        )


def test_upstream_apply_protocol_returns_a_paddle_tensor_with_the_numpy_bits(
    tmp_path: Path,
    make_codes: Callable[..., np.ndarray],
    make_scale: Callable[..., RawTensor],
) -> None:
    ct = build(tmp_path, ((300, 260), (128, 128), "BF16", None), make_codes, make_scale)
    target = TargetSlice((300, 260), (64, 260), (192, 0), "bfloat16")
    plan = ct.read_plan("w", target)
    sources = {
        k: source_to_paddle(v, ct.checkpoint.info(k).dtype)
        for k, v in ct.read_sources(plan).items()
    }
    result = ct.apply("w", sources, paddle.bfloat16)
    assert result.shape == [64, 260]
    np.testing.assert_array_equal(
        bits_with_one_nan(to_numpy(result), "bfloat16"),
        bits_with_one_nan(ct.load("w", "bfloat16")[192:256], "bfloat16"),
    )


def test_e8m0_extremes_keep_subnormal_and_nan_on_paddle(tmp_path: Path) -> None:
    # scale 0x00 = 2^-127 (a float32 subnormal), 0xFE = 2^127, 0xFF = NaN
    codes = np.array([[0x38, 0x01], [0x38, 0x7E], [0x38, 0x00]], np.uint8)
    scale = RawTensor("F8_E8M0", np.array([[0x00], [0xFE], [0xFF]], np.uint8))
    flexq.save_checkpoint(tmp_path, {"w": RawTensor("F8_E4M3", codes), "w_scale": scale})
    ct = flexq.compose(tmp_path, formats=["fp8"])
    plan = ct.plan("w", TargetSlice.whole((3, 2), "float32"))
    sources = ct.read_sources(plan)
    on_device = {k: source_to_paddle(v, ct.checkpoint.info(k).dtype) for k, v in sources.items()}
    want = np.array([[2.0**-127, 2.0**-136], [2.0**127, np.inf], [np.nan, np.nan]], np.float32)
    for got in (
        ct.decode("w", sources, plan, "float32"),
        to_numpy(ct.decode("w", on_device, plan, "float32")),
    ):
        np.testing.assert_array_equal(got, want)
