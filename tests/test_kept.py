"""Keep-quantized FP8 loads (issue 26, FP8 slice): ``flexq.QuantizedTarget`` receives the
checkpoint's own F8 bytes and exact scales, whole or as block-aligned shards, and a
misaligned shard is refused before any read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq
from flexq import RawTensor
from flexq.io.checkpoint import Checkpoint
from flexq_fp8 import save_fp8_checkpoint

KEY = "model.layers.0.mlp.up_proj.weight"
OTHER = "model.layers.0.mlp.down_proj.weight"
NORM = "model.norm.weight"
SHAPE = (96, 80)  # 32x32 blocks: a partial last block along K (80 = 2*32 + 16)


def checkpoint(
    tmp_path: Path, layout: str = "block", scale_dtype: str = "F32", name: str = "fp8"
) -> Path:
    """An FP8 checkpoint written by the fp8 format's own encoder, with a plain norm beside it."""
    rng = np.random.default_rng(7)
    weights = {
        KEY: rng.standard_normal(SHAPE).astype(np.float32),
        OTHER: rng.standard_normal((80, 96)).astype(np.float32),
    }
    norm = RawTensor("F32", rng.standard_normal(80).astype(np.float32))
    return save_fp8_checkpoint(
        tmp_path / name,
        weights,
        layout=layout,  # type: ignore[arg-type]
        block_size=(32, 32) if layout == "block" else None,
        scale_dtype=scale_dtype,  # type: ignore[arg-type]
        others={NORM: norm},
    )


def stored(path: Path, key: str) -> np.ndarray:
    with Checkpoint(path) as ckpt:
        return ckpt.read(key)


def as_bytes(t: Any) -> np.ndarray:
    out: np.ndarray = t.view(paddle.uint8).numpy()
    return out


def fp8_zeros(shape: list[int]) -> Any:
    return paddle.zeros(shape, "float32").astype(paddle.float8_e4m3fn)


def test_a_whole_kept_target_gets_the_checkpoint_bytes_and_scales(tmp_path: Path) -> None:
    path = checkpoint(tmp_path)
    qt = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([3, 3]))
    report = flexq.load_state_dict({KEY: qt}, path)
    assert np.array_equal(as_bytes(qt.values), stored(path, KEY))
    assert np.array_equal(qt.scales.numpy(), stored(path, KEY + "_scale_inv"))
    assert report.bytes_read == 96 * 80 + 9 * 4


def test_dequantizing_the_kept_form_equals_the_dequantized_load_bit_for_bit(
    tmp_path: Path,
) -> None:
    path = checkpoint(tmp_path)
    qt = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([3, 3]))
    plain = paddle.zeros(list(SHAPE), "float32")
    flexq.load_state_dict({KEY: qt}, path)
    flexq.load_state_dict({KEY: plain}, path)
    values = qt.values.astype("float32").numpy()
    scale = np.repeat(np.repeat(qt.scales.numpy(), 32, 0), 32, 1)[: SHAPE[0], : SHAPE[1]]
    assert np.array_equal((values * scale).view(np.uint32), plain.numpy().view(np.uint32))


@pytest.mark.parametrize(
    ("offset", "local", "scale_offset", "scale_local"),
    [
        ((32, 0), (64, 80), (1, 0), (2, 3)),  # Shard(0) of 3 ranks' rows, the last two
        ((0, 64), (96, 16), (0, 2), (3, 1)),  # Shard(1): the partial last block column
        ((0, 32), (96, 32), (0, 1), (3, 1)),
    ],
)
def test_a_block_aligned_shard_gets_its_slice_and_reads_only_its_blocks(
    tmp_path: Path,
    offset: tuple[int, int],
    local: tuple[int, int],
    scale_offset: tuple[int, int],
    scale_local: tuple[int, int],
) -> None:
    path = checkpoint(tmp_path)
    values = fp8_zeros(list(local))
    scales = paddle.zeros(list(scale_local))
    qt = flexq.QuantizedTarget(
        ShardedWeight(KEY, values, local, SHAPE, offset),
        ShardedWeight(KEY + "_scale_inv", scales, scale_local, (3, 3), scale_offset),
    )
    report = flexq.load_state_dict({KEY: qt}, path)
    box = tuple(slice(o, o + n) for o, n in zip(offset, local, strict=True))
    sbox = tuple(slice(o, o + n) for o, n in zip(scale_offset, scale_local, strict=True))
    assert np.array_equal(as_bytes(values), stored(path, KEY)[box])
    assert np.array_equal(scales.numpy(), stored(path, KEY + "_scale_inv")[sbox])
    assert report.bytes_read == int(np.prod(local)) + 4 * int(np.prod(scale_local))


@pytest.mark.parametrize(
    ("offset", "local"), [((16, 0), (48, 80)), ((0, 0), (48, 80)), ((0, 40), (96, 40))]
)
def test_a_shard_that_cuts_a_block_is_refused_before_any_read(
    tmp_path: Path,
    checkpoint_reads: list[str],
    offset: tuple[int, int],
    local: tuple[int, int],
) -> None:
    path = checkpoint(tmp_path)
    values = paddle.full(list(local), 3.0).astype(paddle.float8_e4m3fn)
    scales = paddle.full([2, 2], 5.0)
    norm = paddle.full([80], 9.0)
    qt = flexq.QuantizedTarget(
        ShardedWeight(KEY, values, local, SHAPE, offset),
        ShardedWeight(KEY + "_scale_inv", scales, (2, 2), (3, 3), (0, 0)),
    )
    with pytest.raises(flexq.TargetError, match=r"offset \[.*\].*cuts the checkpoint's block"):
        flexq.load_state_dict({KEY: qt, NORM: norm}, path)
    assert checkpoint_reads == []
    assert (values.astype("float32").numpy() == 3.0).all()
    assert (scales.numpy() == 5.0).all()
    assert (norm.numpy() == 9.0).all()


def test_kept_targets_load_beside_dequantized_targets_and_norms_in_one_call(
    tmp_path: Path,
) -> None:
    path = checkpoint(tmp_path)
    qt = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([3, 3]))
    other = paddle.zeros([80, 96], "float32")
    norm = paddle.zeros([80], "float32")
    flexq.load_state_dict({KEY: qt, OTHER: other, NORM: norm}, path)
    alone = paddle.zeros([80, 96], "float32")
    flexq.load_state_dict({OTHER: alone}, path)
    assert np.array_equal(as_bytes(qt.values), stored(path, KEY))
    assert np.array_equal(other.numpy(), alone.numpy())
    assert np.array_equal(norm.numpy(), stored(path, NORM))


@pytest.mark.parametrize("scale_dtype", ["BF16", "F16"])
def test_half_precision_scales_widen_to_float32_exactly(tmp_path: Path, scale_dtype: str) -> None:
    path = checkpoint(tmp_path, scale_dtype=scale_dtype)
    qt = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([3, 3]))
    plain = paddle.zeros(list(SHAPE), "float32")
    flexq.load_state_dict({KEY: qt}, path)
    flexq.load_state_dict({KEY: plain}, path)
    raw = stored(path, KEY + "_scale_inv")
    want = (
        (raw.astype(np.uint32) << 16).view(np.float32)
        if scale_dtype == "BF16"
        else raw.astype(np.float32)
    )
    assert np.array_equal(qt.scales.numpy(), want)
    scale = np.repeat(np.repeat(want, 32, 0), 32, 1)[: SHAPE[0], : SHAPE[1]]
    values = qt.values.astype("float32").numpy()
    assert np.array_equal(values * scale, plain.numpy())


def test_a_per_tensor_scale_broadcasts_into_a_block_grid_only_with_block(tmp_path: Path) -> None:
    path = checkpoint(tmp_path, layout="tensor")
    scale = float(stored(path, KEY + "_scale").reshape(()))
    qt = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([3, 3]), block=(32, 32))
    flexq.load_state_dict({KEY: qt}, path)
    assert (qt.scales.numpy() == scale).all()
    assert np.array_equal(as_bytes(qt.values), stored(path, KEY))
    bare = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([3, 3]))
    with pytest.raises(flexq.TargetError, match=r"per-tensor scale needs scales of shape"):
        flexq.load_state_dict({KEY: bare}, path)
    one = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([1]))
    flexq.load_state_dict({KEY: one}, path)
    assert one.scales.numpy().tolist() == [scale]


def test_a_per_channel_checkpoint_keeps_its_channel_scales(tmp_path: Path) -> None:
    path = checkpoint(tmp_path, layout="channel")
    qt = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([96, 1]))
    flexq.load_state_dict({KEY: qt}, path)
    assert np.array_equal(qt.scales.numpy().reshape(-1), stored(path, KEY + "_scale").reshape(-1))


def test_parts_of_the_wrong_dtype_or_shape_are_refused_naming_what_is_expected(
    tmp_path: Path,
) -> None:
    path = checkpoint(tmp_path)
    wrong_values = flexq.QuantizedTarget(paddle.zeros(list(SHAPE)), paddle.zeros([3, 3]))
    with pytest.raises(
        flexq.TargetError, match=r"values must be float8_e4m3fn of shape \[96, 80\]"
    ):
        flexq.load_state_dict({KEY: wrong_values}, path)
    wrong_scales = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([96, 1]))
    with pytest.raises(flexq.TargetError, match=r"scales must be the grid \[3, 3\] of block"):
        flexq.load_state_dict({KEY: wrong_scales}, path)
    norm = flexq.QuantizedTarget(fp8_zeros([80]), paddle.zeros([1]))
    with pytest.raises(flexq.TargetError, match=r"F8_E4M3 weight"):
        flexq.load_state_dict({NORM: norm}, path)


def test_e8m0_scales_keep_their_bytes_or_widen_to_float32_exactly(tmp_path: Path) -> None:
    path = checkpoint(tmp_path, scale_dtype="U8")
    raw = stored(path, KEY + "_scale_inv")
    as_u8 = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([3, 3], "uint8"))
    as_f32 = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([3, 3]))
    plain = paddle.zeros(list(SHAPE), "float32")
    flexq.load_state_dict({KEY: as_u8}, path)
    flexq.load_state_dict({KEY: as_f32}, path)
    flexq.load_state_dict({KEY: plain}, path)
    assert np.array_equal(as_u8.scales.numpy(), raw)
    assert np.array_equal(as_f32.scales.numpy(), np.exp2(raw.astype(np.float32) - 127))
    scale = np.repeat(np.repeat(as_f32.scales.numpy(), 32, 0), 32, 1)[: SHAPE[0], : SHAPE[1]]
    values = as_u8.values.astype("float32").numpy()
    assert np.array_equal((values * scale).view(np.uint32), plain.numpy().view(np.uint32))


def test_float32_power_of_two_scales_become_e8m0_and_others_are_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    exps = rng.integers(-20, 5, (3, 3))
    pow2 = RawTensor("F32", np.exp2(exps).astype(np.float32))
    weight = RawTensor("F8_E4M3", rng.integers(0, 0x7E, SHAPE, dtype=np.uint8))
    config = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [32, 32]}}
    path = flexq.save_checkpoint(
        tmp_path / "ue8m0", {KEY: weight, KEY + "_scale_inv": pow2}, config=config
    )
    qt = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.zeros([3, 3], "uint8"))
    flexq.load_state_dict({KEY: qt}, path)
    assert np.array_equal(qt.scales.numpy(), (exps + 127).astype(np.uint8))
    # arbitrary float32 scales are no E8M0: refused, and the ordinary target beside it
    # in the same call stays as it was
    path = checkpoint(tmp_path, name="f32")
    qt = flexq.QuantizedTarget(fp8_zeros(list(SHAPE)), paddle.full([3, 3], 7, "uint8"))
    other = paddle.full([80, 96], 2.0)
    with pytest.raises(flexq.TargetError, match=r"no power of two.*use float32 scales"):
        flexq.load_state_dict({KEY: qt, OTHER: other}, path)
    assert (qt.scales.numpy() == 7).all()
    assert (other.numpy() == 2.0).all()


def test_an_ordinary_target_that_fails_its_checks_leaves_kept_targets_unread_and_unchanged(
    tmp_path: Path, checkpoint_reads: list[str]
) -> None:
    path = checkpoint(tmp_path)
    qt = flexq.QuantizedTarget(
        paddle.full(list(SHAPE), 3.0).astype(paddle.float8_e4m3fn), paddle.full([3, 3], 5.0)
    )
    wrong = paddle.full([80, 95], 1.0)  # OTHER is [80, 96]
    with pytest.raises(flexq.FlexqError, match=OTHER.replace(".", r"\.")):
        flexq.load_state_dict({KEY: qt, OTHER: wrong}, path)
    assert KEY not in checkpoint_reads
    assert KEY + "_scale_inv" not in checkpoint_reads
    assert (qt.values.astype("float32").numpy() == 3.0).all()
    assert (qt.scales.numpy() == 5.0).all()


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint"])
def test_bytes_read_of_a_mixed_load_are_the_ordinary_plans_plus_the_kept_blocks(
    tmp_path: Path, engine: str
) -> None:
    path = checkpoint(tmp_path)
    alone = flexq.load_state_dict({NORM: paddle.zeros([80])}, path, engine=engine)  # type: ignore[arg-type]
    values = fp8_zeros([32, 80])
    scales = paddle.zeros([1, 3])
    qt = flexq.QuantizedTarget(
        ShardedWeight(KEY, values, (32, 80), SHAPE, (64, 0)),
        ShardedWeight(KEY + "_scale_inv", scales, (1, 3), (3, 3), (2, 0)),
    )
    norm = paddle.zeros([80])
    report = flexq.load_state_dict({KEY: qt, NORM: norm}, path, engine=engine)  # type: ignore[arg-type]
    assert report.engine == engine
    assert report.bytes_read == alone.bytes_read + 32 * 80 + 3 * 4
    assert np.array_equal(as_bytes(values), stored(path, KEY)[64:])
    assert np.array_equal(norm.numpy(), stored(path, NORM))


def stacked_checkpoint(tmp_path: Path) -> Path:
    rng = np.random.default_rng(8)
    experts = {"experts.gate_up_proj": rng.standard_normal((3, 64, 96)).astype(np.float32)}
    return save_fp8_checkpoint(tmp_path / "stacked", experts, layout="block", block_size=(32, 32))


def test_stacked_fp8_experts_split_along_e_need_no_alignment(tmp_path: Path) -> None:
    path = stacked_checkpoint(tmp_path)
    key = "experts.gate_up_proj"
    values = fp8_zeros([1, 64, 96])
    scales = paddle.zeros([1, 2, 3])
    qt = flexq.QuantizedTarget(
        ShardedWeight(key, values, (1, 64, 96), (3, 64, 96), (1, 0, 0)),
        ShardedWeight(key + ".s", scales, (1, 2, 3), (3, 2, 3), (1, 0, 0)),
    )
    report = flexq.load_state_dict({key: qt}, path)
    assert np.array_equal(as_bytes(values), stored(path, key)[1:2])
    assert np.array_equal(scales.numpy(), stored(path, key + "_scale_inv")[1:2])
    assert report.bytes_read == 64 * 96 + 6 * 4


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_block_aligned_box_of_a_kept_fp8_form_is_the_reference_slice(
    tmp_path: Path, data: st.DataObject
) -> None:
    """Random block-aligned boxes of stacked [3, 64, 96] FP8 experts in 32x32 blocks (E any):
    the values are the stored bytes' slice, the scales the covering blocks' slice."""
    if not (tmp_path / "stacked").exists():
        stacked_checkpoint(tmp_path)
    path, key = tmp_path / "stacked", "experts.gate_up_proj"
    full, block = (3, 64, 96), (1, 32, 32)
    offset, local = [], []
    for size, b in zip(full, block, strict=True):
        lo = data.draw(st.integers(0, size // b - 1)) * b
        hi = data.draw(st.integers(lo // b + 1, size // b)) * b
        offset.append(lo)
        local.append(hi - lo)
    grid = tuple(n // b for n, b in zip(local, block, strict=True))
    goff = tuple(o // b for o, b in zip(offset, block, strict=True))
    values, scales = fp8_zeros(local), paddle.zeros(list(grid))
    qt = flexq.QuantizedTarget(
        ShardedWeight(key, values, tuple(local), full, tuple(offset)),
        ShardedWeight(key + ".s", scales, grid, (3, 2, 3), goff),
    )
    flexq.load_state_dict({key: qt}, path)
    box = tuple(slice(o, o + n) for o, n in zip(offset, local, strict=True))
    sbox = tuple(slice(o, o + n) for o, n in zip(goff, grid, strict=True))
    assert np.array_equal(as_bytes(values), stored(path, key)[box])
    assert np.array_equal(scales.numpy(), stored(path, key + "_scale_inv")[sbox])
