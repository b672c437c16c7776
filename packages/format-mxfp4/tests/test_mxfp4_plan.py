"""Local read plans: exact boxes, local == slice of global, bounded reads, and the Paddle path."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flexq
from flexq import TargetSlice

FORMATS = ["mxfp4"]
Build = Callable[..., Path]
RandomMx = Callable[..., tuple[np.ndarray, np.ndarray]]


def bits(x: Any) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def write_case(
    directory: Path,
    build: Build,
    random_mx: RandomMx,
    layout: str,
    lead: tuple[int, ...],
    n: int,
    dtypes: tuple[str, str],
    seed: int,
) -> tuple[flexq.ComposedTransform, str]:
    """One MXFP4 tensor of logical shape (*lead, n) in ``layout``; returns (transform, key)."""
    packed, scales = random_mx(np.random.default_rng(seed), lead, n)
    if layout == "gpt-oss":
        key, names = "w", ("w_blocks", "w_scales")
        packed = packed.reshape(*lead, n // 32, 16)
    else:
        key, names = "m.weight", ("m.weight_packed", "m.weight_scale")
    tensors = {
        names[0]: flexq.RawTensor(dtypes[0], packed),
        names[1]: flexq.RawTensor(dtypes[1], scales),
    }
    return flexq.compose(build(directory, tensors), formats=FORMATS), key


def test_unaligned_last_axis_reads_only_the_covering_blocks(
    tmp_path: Path, build: Build, random_mx_data: RandomMx
) -> None:
    ct, key = write_case(
        tmp_path / "c", build, random_mx_data, "compressed-tensors", (6,), 96, ("U8", "U8"), 0
    )
    plan = ct.plan(key, TargetSlice((6, 96), (2, 20), (3, 40), "float32"))
    assert plan.mode == "local"
    assert dict(plan.source_slices) == {
        "m.weight_packed": ((3, 16), (2, 16)),  # block 1 only: bytes [16, 32)
        "m.weight_scale": ((3, 1), (2, 1)),
    }
    plan = ct.plan(key, TargetSlice((6, 96), (1, 65), (0, 5), "float32"))
    assert dict(plan.source_slices) == {
        "m.weight_packed": ((0, 0), (1, 48)),
        "m.weight_scale": ((0, 0), (1, 3)),
    }


def test_gpt_oss_expert_box_maps_to_block_boxes(
    tmp_path: Path, build: Build, random_mx_data: RandomMx
) -> None:
    ct, key = write_case(
        tmp_path / "c", build, random_mx_data, "gpt-oss", (3, 6), 128, ("F4", "F8_E8M0"), 0
    )
    target = TargetSlice((3, 6, 128), (1, 2, 57), (1, 3, 33), "bfloat16")
    plan = ct.plan(key, target)
    assert dict(plan.source_slices) == {
        "w_blocks": ((1, 3, 1, 0), (1, 2, 2, 32)),  # F4 headers count elements
        "w_scales": ((1, 3, 1), (1, 2, 2)),
    }
    before = ct.checkpoint.bytes_read
    local = ct.dequantize(key, ct.read_sources(plan), plan, "float32")
    assert ct.checkpoint.bytes_read - before == 2 * (2 * 16 + 2)
    whole = ct.load(key, "float32")
    np.testing.assert_array_equal(bits(local), bits(whole[1:2, 3:5, 33:90]))


def test_force_global_gives_the_whole_tensor(
    tmp_path: Path, build: Build, random_mx_data: RandomMx
) -> None:
    ct, key = write_case(
        tmp_path / "c", build, random_mx_data, "gpt-oss", (4,), 64, ("U8", "U8"), 0
    )
    plan = ct.plan(key, TargetSlice((4, 64), (2, 10), (2, 40), "float32"), force_global=True)
    assert plan.mode == "global"
    assert plan.target.local_shape == (4, 64)
    out = ct.dequantize(key, ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(bits(out), bits(ct.load(key, "float32")))


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    layout = draw(st.sampled_from(["gpt-oss", "compressed-tensors"]))
    lead = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=2)))
    n = draw(st.integers(1, 4)) * 32 if layout == "gpt-oss" else draw(st.integers(1, 72)) * 2
    shape = (*lead, n)
    offset, local = [], []
    for d in shape:
        o = draw(st.integers(0, d - 1))
        offset.append(o)
        local.append(draw(st.integers(1, d - o)))
    return {
        "layout": layout,
        "lead": lead,
        "n": n,
        "dtypes": draw(st.sampled_from([("U8", "U8"), ("F4", "F8_E8M0")])),
        "offset": tuple(offset),
        "local": tuple(local),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_local_plan_equals_the_slice_of_the_global_result(
    case: dict[str, Any], build: Build, random_mx_data: RandomMx
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ct, key = write_case(
            Path(tmp),
            build,
            random_mx_data,
            case["layout"],
            case["lead"],
            case["n"],
            case["dtypes"],
            case["seed"],
        )
        shape = (*case["lead"], case["n"])
        whole = ct.load(key, "float32")
        target = TargetSlice(shape, case["local"], case["offset"], "float32")
        plan = ct.plan(key, target)
        assert plan.mode == "local"
        before = ct.checkpoint.bytes_read
        sources = ct.read_sources(plan)
        read = ct.checkpoint.bytes_read - before
        local = ct.dequantize(key, sources, plan, "float32")
        box = tuple(slice(o, o + s) for o, s in zip(case["offset"], case["local"], strict=True))
        np.testing.assert_array_equal(bits(local), bits(whole[box]))
        # Per row: at most the covering blocks, i.e. ceil(size/32) + 1 blocks of 16 + 1 bytes.
        rows = int(np.prod(case["local"][:-1]))
        assert read <= rows * (case["local"][-1] // 32 + 2) * 17
        on_device = {k: paddle.to_tensor(v) for k, v in sources.items()}
        from_paddle = ct.dequantize(key, on_device, plan, "float32")
        np.testing.assert_array_equal(bits(from_paddle.numpy()), bits(local))
        ct.checkpoint.close()


@pytest.mark.parametrize("layout", ["gpt-oss", "compressed-tensors"])
def test_paddle_sources_through_the_load_transform_protocol_are_bit_identical(
    tmp_path: Path, build: Build, random_mx_data: RandomMx, layout: str
) -> None:
    n = 96 if layout == "gpt-oss" else 84  # 84: a partial last block
    ct, key = write_case(tmp_path / "c", build, random_mx_data, layout, (2, 5), n, ("U8", "U8"), 7)
    # Every block is touched, so the NaN (0xFF) and 2^-127 (0x00) scales are in the box.
    target = TargetSlice((2, 5, n), (2, 5, n - 13), (0, 0, 7), "bfloat16")
    plan = ct.read_plan(key, target)
    sources = ct.read_sources(plan)
    want32 = ct.dequantize(key, sources, plan, "float32")
    want16 = ct.dequantize(key, sources, plan, "bfloat16")
    on_device = {k: paddle.to_tensor(v) for k, v in sources.items()}
    got32 = ct.apply(key, on_device, paddle.float32)
    assert got32.place.is_cpu_place()
    np.testing.assert_array_equal(bits(got32.numpy()), bits(want32))
    got16 = ct.apply(key, on_device, "bfloat16")
    assert got16.dtype == paddle.bfloat16
    got_bits = got16.view(paddle.uint16).numpy()
    # Paddle's float32 -> bfloat16 cast (in the core, after apply) writes every NaN
    # as 0x7FFF, the numpy rounding as a quiet NaN with the sign kept (0x7FC0/0xFFC0):
    # NaN positions must agree, every other value bit for bit.
    nan = (want16 & 0x7FFF) > 0x7F80
    np.testing.assert_array_equal((got_bits & 0x7FFF) > 0x7F80, nan)
    np.testing.assert_array_equal(got_bits[~nan], want16[~nan])
    assert nan.any()
