"""Local read plans: exact boxes, local == slice of global, bounded reads, and the Paddle path."""

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
from flexq import TargetSlice
from flexq.testing import local_and_whole, same_bfloat16
from flexq.testing.strategies import box_case, examples

CT, MO, AR = "compressed-tensors", "modelopt", "auto-round"
#: auto-round's own format shares compressed-tensors' names; its config picks its math.
AR_CONFIG = {"quantization_config": {"quant_method": "auto-round", "data_type": "nv_fp"}}
FORMATS = ["nvfp4"]
BASE = "model.layers.0.mlp.up_proj"
KEY = BASE + ".weight"
Build = Callable[..., Path]
Nv = Callable[..., dict[str, flexq.RawTensor]]
RandomNv = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]


def bits(x: Any) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def assert_same(got: Any, want: Any) -> None:
    """Bit for bit, except that any NaN matches any NaN."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(bits(got)[~nan], bits(want)[~nan])


def write_case(
    directory: Path,
    build: Build,
    nv: Nv,
    random_nv: RandomNv,
    producer: str,
    lead: tuple[int, ...],
    n: int,
    seed: int,
) -> flexq.ComposedTransform:
    packed, scales, glob = random_nv(np.random.default_rng(seed), lead, n)
    tensors = nv(producer, BASE, packed, scales, glob)
    return flexq.compose(build(directory, tensors, AR_CONFIG if producer == AR else None), FORMATS)


@pytest.mark.parametrize("producer", [CT, MO])
def test_plan_reads_the_covering_blocks_and_the_global_scale(
    tmp_path: Path, build: Build, nv: Nv, random_nv_data: RandomNv, producer: str
) -> None:
    ct = write_case(tmp_path / "c", build, nv, random_nv_data, producer, (6,), 96, 0)
    codes, scale, glob = ct.entries[KEY].sources
    g_box = ((0,), (1,)) if producer == CT else ((), ())
    plan = ct.plan(KEY, TargetSlice((6, 96), (2, 10), (3, 20), "float32"))
    assert plan.mode == "local"
    assert dict(plan.source_slices) == {
        codes: ((3, 8), (2, 8)),  # block 1 only: bytes [8, 16)
        scale: ((3, 1), (2, 1)),
        glob: g_box,
    }
    plan = ct.plan(KEY, TargetSlice((6, 96), (1, 33), (5, 15), "float32"))
    assert dict(plan.source_slices)[codes] == ((5, 0), (1, 24))  # blocks 0..2
    assert dict(plan.source_slices)[scale] == ((5, 0), (1, 3))


def test_partial_last_block_plans_stay_inside_the_codes(
    tmp_path: Path, build: Build, nv: Nv, random_nv_data: RandomNv
) -> None:
    ct = write_case(tmp_path / "c", build, nv, random_nv_data, CT, (2,), 40, 1)  # 16+16+8
    plan = ct.plan(KEY, TargetSlice((2, 40), (2, 5), (0, 35), "float32"))
    assert dict(plan.source_slices)[BASE + ".weight_packed"] == ((0, 16), (2, 4))
    local = ct.decode(KEY, ct.read_sources(plan), plan, "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flexq.ScaleWarning)
        whole = ct.load(KEY, "float32")
    assert_same(local, whole[:, 35:])


def test_force_global_gives_the_whole_tensor(
    tmp_path: Path, build: Build, nv: Nv, random_nv_data: RandomNv
) -> None:
    packed = np.random.default_rng(0).integers(0, 256, (4, 32), dtype=np.uint8)
    scales = np.full((4, 4), 0x38, np.uint8)
    path = build(tmp_path / "c", nv(MO, BASE, packed, scales, np.array([0.5], np.float32)))
    ct = flexq.compose(path, FORMATS)
    plan = ct.plan(KEY, TargetSlice((4, 64), (2, 10), (2, 40), "float32"), force_global=True)
    assert plan.mode == "global"
    out = ct.decode(KEY, ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(bits(out), bits(ct.load(KEY, "float32")))


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    lead = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=2)))
    n = draw(st.integers(1, 48)) * 2
    shape = (*lead, n)
    return {
        "producer": draw(st.sampled_from([CT, MO, AR])),
        "lead": lead,
        "n": n,
        **draw(box_case(shape)),
    }


@examples(60)
@given(case=cases())
def test_local_plan_equals_the_slice_of_the_global_result(
    case: dict[str, Any], build: Build, nv: Nv, random_nv_data: RandomNv
) -> None:
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", flexq.ScaleWarning)
        ct = write_case(
            Path(tmp),
            build,
            nv,
            random_nv_data,
            case["producer"],
            case["lead"],
            case["n"],
            case["seed"],
        )
        local, sliced, read, plan, sources = local_and_whole(ct, KEY, case["offset"], case["local"])
        assert_same(local, sliced)
        # Per row at most the covering blocks (ceil(size/16) + 1 of 8 code bytes and one
        # scale byte), plus the 4-byte global scale once.
        rows = int(np.prod(case["local"][:-1]))
        assert read <= rows * (case["local"][-1] // 16 + 2) * 9 + 4
        on_device = {k: paddle.to_tensor(v) for k, v in sources.items()}
        from_paddle = ct.decode(KEY, on_device, plan, "float32")
        assert_same(from_paddle.numpy(), local)
        ct.checkpoint.close()


@pytest.mark.parametrize("producer", [CT, MO, AR])
def test_paddle_sources_through_the_load_transform_protocol_are_bit_identical(
    tmp_path: Path, build: Build, nv: Nv, random_nv_data: RandomNv, producer: str
) -> None:
    ct = write_case(tmp_path / "c", build, nv, random_nv_data, producer, (3, 5), 88, 7)
    target = TargetSlice((3, 5, 88), (3, 4, 75), (0, 1, 5), "bfloat16")
    plan = ct.read_plan(KEY, target)
    sources = ct.read_sources(plan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flexq.ScaleWarning)
        want32 = ct.decode(KEY, sources, plan, "float32")
        want16 = ct.decode(KEY, sources, plan, "bfloat16")
        on_device = {k: paddle.to_tensor(v) for k, v in sources.items()}
        got32 = ct.apply(KEY, on_device, paddle.float32)
        got16 = ct.apply(KEY, on_device, "bfloat16")
    assert got32.place.is_cpu_place()
    assert_same(got32.numpy(), want32)
    assert got16.dtype == paddle.bfloat16
    same_bfloat16(got16.view(paddle.uint16).numpy(), want16)  # NaN payloads aside
    assert ((want16 & 0x7FFF) > 0x7F80).any()
