"""``flexq.nn.QuantizedLinear`` on CPU: each kept form's forward equals a
``paddle.nn.Linear`` holding the dequantized weight, bit for bit (the same float32
matmul), and the dequantized weight equals an independent numpy oracle of the form."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import ml_dtypes
import numpy as np
import paddle
import pytest

import flexq
from flexq.errors import TargetError
from flexq.nn import KeptForm, QuantizedLinear, fp4_form, fp8_form
from flexq_fp8 import save_fp8_checkpoint
from flexq_mxfp4.encode import save_mxfp4_checkpoint

if TYPE_CHECKING:
    from flexq.nn.forms import Fp8Scales, Producer

N, K = 96, 64  # 3 x 2 blocks of 32x32 (two MXFP4 blocks, four NVFP4 blocks a row)
#: E2M1 code -> value (OCP MX / compressed-tensors; ModelOpt's code 8 is +0.0).
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


#: FP8 case -> fp8_form's (granularity, block, scale dtype).
FP8: dict[str, tuple[Literal["tensor", "channel", "block"], tuple[int, int], Fp8Scales]] = {
    "fp8-tensor": ("tensor", (32, 32), "float32"),
    "fp8-channel": ("channel", (32, 32), "float32"),
    "fp8-block": ("block", (32, 32), "float32"),
    "fp8-e8m0": ("block", (32, 32), "e8m0"),
}
#: NVFP4 case -> the producer whose convention it follows.
NVFP4: dict[str, Producer] = {
    "nvfp4-compressed-tensors": "compressed-tensors",
    "nvfp4-modelopt": "modelopt",
    "nvfp4-auto-round": "auto-round",
}


def _e4m3_bytes(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random E4M3 bytes without the two NaN codes (0x7F, 0xFF)."""
    b = rng.integers(0, 256, shape).astype(np.uint8)
    return np.where((b & 0x7F) == 0x7F, b & 0xF0, b).astype(np.uint8)


def _e4m3(b: np.ndarray) -> np.ndarray:
    out: np.ndarray = b.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    return out


def _e2m1(packed: np.ndarray) -> np.ndarray:
    """[N, K/2] bytes -> [N, K], element 2j from the low nibble of byte j."""
    out = np.empty((packed.shape[0], packed.shape[1] * 2), np.float32)
    out[:, 0::2], out[:, 1::2] = E2M1[packed & 0x0F], E2M1[packed >> 4]
    return out


def _case(
    kind: str, rng: np.random.Generator
) -> tuple[KeptForm, dict[str, np.ndarray], np.ndarray]:
    """A form, its stored parts and the oracle's float32 [N, K] weight."""
    if kind.startswith("fp8"):
        values = _e4m3_bytes(rng, (N, K))
        form = fp8_form(N, K, *FP8[kind])
        grid = form.scales_shape
        scales: np.ndarray
        if form.scale_dtype == "e8m0":
            scales = rng.integers(120, 134, grid).astype(np.uint8)
            f32 = np.exp2(scales.astype(np.float64) - 127).astype(np.float32)
        else:
            scales = f32 = rng.uniform(0.01, 2.0, grid).astype(np.float32)
        spread = np.broadcast_to(f32, (1, 1)) if grid == () else f32
        spread = np.repeat(np.repeat(spread, form.block[0], 0), form.block[1], 1)[:N, :K]
        return form, {"weight": values, "scale": scales}, _e4m3(values) * spread
    packed = rng.integers(0, 256, (N, K // 2)).astype(np.uint8)
    if kind == "mxfp4":
        form = fp4_form("mxfp4", N, K)
        scales = rng.integers(120, 134, (N, K // 32)).astype(np.uint8)
        s = np.exp2(scales.astype(np.float64) - 127).astype(np.float32)
        return form, {"weight": packed, "scale": scales}, _e2m1(packed) * np.repeat(s, 32, 1)
    producer = NVFP4[kind]
    form = fp4_form("nvfp4", N, K, producer)
    scales = (_e4m3_bytes(rng, (N, K // 16)) & 0x7F).astype(np.uint8)  # positive block scales
    g = np.array([rng.uniform(100, 3000)], np.float32)
    s = _e4m3(scales)
    eff = s / g[0] if producer == "compressed-tensors" else s * g[0]
    elements = _e2m1(packed)
    if producer == "modelopt":
        elements = np.where(elements == 0, np.float32(0), elements)  # its code 8 is +0.0
    weight = elements * np.repeat(eff.astype(np.float32), 16, 1)
    return form, {"weight": packed, "scale": scales, "global": g}, weight


def _layer(
    form: KeptForm, parts: dict[str, np.ndarray], bias: np.ndarray | None
) -> QuantizedLinear:
    layer = QuantizedLinear(form, bias=bias is not None, bias_dtype="float32")
    values = paddle.to_tensor(parts["weight"])
    layer.weight.copy_(values.view(paddle.float8_e4m3fn) if form.kind == "fp8" else values, False)
    scale = paddle.to_tensor(parts["scale"])
    layer.scales.copy_(scale.view(paddle.float8_e4m3fn) if form.kind == "nvfp4" else scale, False)
    if "global" in parts:
        assert layer.weight_global_scale is not None
        layer.weight_global_scale.copy_(paddle.to_tensor(parts["global"]), False)
    if bias is not None:
        assert layer.bias is not None
        layer.bias.copy_(paddle.to_tensor(bias), False)
    return layer


def _dense(weight: np.ndarray, bias: np.ndarray | None) -> paddle.nn.Linear:
    dense = paddle.nn.Linear(K, N, bias_attr=None if bias is not None else False)
    dense.weight.set_value(paddle.to_tensor(np.ascontiguousarray(weight.T)))
    if bias is not None:
        dense.bias.set_value(paddle.to_tensor(bias))
    return dense


KINDS = [
    "fp8-tensor",
    "fp8-channel",
    "fp8-block",
    "fp8-e8m0",
    "mxfp4",
    "nvfp4-compressed-tensors",
    "nvfp4-modelopt",
    "nvfp4-auto-round",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_forward_equals_the_dequantized_linear_bit_for_bit(kind: str, with_bias: bool) -> None:
    rng = np.random.default_rng(KINDS.index(kind))
    form, parts, weight = _case(kind, rng)
    if kind == "nvfp4-auto-round":
        # auto-round's own order: (e2m1 * (1/g)) * s, each product rounded in float32.
        r = np.float32(1) / parts["global"][0]
        weight = (_e2m1(parts["weight"]) * r) * np.repeat(_e4m3(parts["scale"]), 16, 1)
    bias = rng.standard_normal(N).astype(np.float32) if with_bias else None
    layer = _layer(form, parts, bias)
    assert layer.dequantized().numpy().tobytes() == weight.tobytes()  # signed zeros too
    x = paddle.to_tensor(rng.standard_normal((2, 3, K)).astype(np.float32))
    got, want = layer(x).numpy(), _dense(weight, bias)(x).numpy()
    assert got.shape == (2, 3, N)
    assert got.tobytes() == want.tobytes()


def test_bf16_activations_get_the_float32_result_rounded_once() -> None:
    form, parts, weight = _case("fp8-block", np.random.default_rng(1))
    layer = _layer(form, parts, None)
    x = paddle.to_tensor(np.random.default_rng(2).standard_normal((4, K)).astype(np.float32))
    xb = x.astype("bfloat16")
    got = layer(xb)
    assert got.dtype == paddle.bfloat16
    want = _dense(weight, None)(xb.astype("float32")).astype("bfloat16")
    assert got.view(paddle.uint16).numpy().tobytes() == want.view(paddle.uint16).numpy().tobytes()


@pytest.mark.parametrize(
    ("form", "nbytes"),
    [
        (fp8_form(N, K, "block", (32, 32)), N * K + 3 * 2 * 4),
        (fp4_form("mxfp4", N, K), N * K // 2 + N * K // 32),
        (fp4_form("nvfp4", N, K), N * K // 2 + N * K // 16 + 4),
    ],
)
def test_parameters_hold_only_the_kept_bytes(form: KeptForm, nbytes: int) -> None:
    layer = QuantizedLinear(form)
    held = sum(int(np.prod(p.shape)) * p.element_size() for p in layer.parameters())
    assert held == nbytes
    assert all(p.stop_gradient for p in layer.parameters())


def test_a_lazy_layer_has_no_storage_until_loaded() -> None:
    with paddle.LazyGuard():
        layer = QuantizedLinear(fp8_form(N, K, "block", (32, 32)))
    assert not layer.weight._is_initialized()


def test_a_wrong_input_width_is_a_target_error() -> None:
    layer = QuantizedLinear(fp8_form(N, K, "tensor"))
    with pytest.raises(TargetError, match=f"input has {K + 1} features"):
        layer(paddle.ones([1, K + 1]))


def test_an_odd_fp4_width_is_refused() -> None:
    with pytest.raises(TargetError, match="in_features must be even"):
        fp4_form("mxfp4", N, 33)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_a_kept_load_computes_what_the_dequantized_load_computes(tmp_path: Any, fmt: str) -> None:
    """The layer filled through flexq.QuantizedTarget from a real FP8 (128x128-style 32x32
    blocks) or compressed-tensors MXFP4 checkpoint gives the same output as a Linear
    filled by the ordinary (dequantizing) float32 load."""
    key = "model.layers.0.mlp.up_proj.weight"
    w = np.random.default_rng(3).standard_normal((N, K)).astype(np.float32)
    if fmt == "fp8":
        path = save_fp8_checkpoint(tmp_path / fmt, {key: w}, layout="block", block_size=(32, 32))
        form = fp8_form(N, K, "block", (32, 32))
    else:
        path = save_mxfp4_checkpoint(tmp_path / fmt, {key: w})
        form = fp4_form("mxfp4", N, K)
    layer = QuantizedLinear(form)
    flexq.load_state_dict({key: flexq.QuantizedTarget(layer.weight, layer.scales)}, path)
    plain = paddle.zeros([N, K], "float32")
    flexq.load_state_dict({key: plain}, path)
    x = paddle.to_tensor(np.random.default_rng(4).standard_normal((5, K)).astype(np.float32))
    assert layer(x).numpy().tobytes() == _dense(plain.numpy(), None)(x).numpy().tobytes()


def test_a_lazy_layer_is_allocated_and_filled_by_a_kept_load(tmp_path: Any) -> None:
    """A QuantizedLinear built under paddle.LazyGuard (as models are built) gets the
    checkpoint's bytes and scales from the load."""
    key = "model.layers.0.mlp.up_proj.weight"
    w = np.random.default_rng(5).standard_normal((N, K)).astype(np.float32)
    path = save_fp8_checkpoint(tmp_path / "fp8", {key: w}, layout="block", block_size=(32, 32))
    with paddle.LazyGuard():
        layer = QuantizedLinear(fp8_form(N, K, "block", (32, 32)))
    flexq.load_state_dict({key: flexq.QuantizedTarget(layer.weight, layer.weight_scale_inv)}, path)
    with flexq.Checkpoint(path) as ckpt:
        assert layer.weight.view(paddle.uint8).numpy().tobytes() == ckpt.read(key).tobytes()
        np.testing.assert_array_equal(layer.weight_scale_inv.numpy(), ckpt.read(key + "_scale_inv"))


def test_a_shard_of_exactly_one_block_keeps_its_one_block_grid(tmp_path: Any) -> None:
    """A tensor-parallel rank's shard may be one block (rows 32..64 of a 64 x 32 weight
    with 32x32 blocks): its scales stay a [1, 1] grid, not a per-tensor [], and the
    layer computes with the shard's block."""
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

    w = np.random.default_rng(5).standard_normal((64, 32)).astype(np.float32)
    path = save_fp8_checkpoint(tmp_path / "fp8", {"w": w}, layout="block", block_size=(32, 32))
    form = fp8_form(32, 32, "block", (32, 32))
    assert form.scales_shape == (1, 1)
    assert fp8_form(32, 32, "tensor").scales_shape == ()
    layer = QuantizedLinear(form)
    qt = flexq.QuantizedTarget(
        ShardedWeight("w", layer.weight, (32, 32), (64, 32), (32, 0)),
        ShardedWeight("s", layer.weight_scale_inv, (1, 1), (2, 1), (1, 0)),
    )
    flexq.load_state_dict({"w": qt}, path)
    whole = paddle.zeros([64, 32])
    flexq.load_state_dict({"w": whole}, path)
    x = paddle.to_tensor(np.random.default_rng(6).standard_normal((3, 32)).astype(np.float32))
    want = paddle.nn.functional.linear(x, whole[32:].t())
    assert np.array_equal(layer(x).numpy(), want.numpy())
