"""Local read plans: exact boxes, local == slice of global, bounded reads, and the Paddle path."""

from __future__ import annotations

import tempfile
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
    # blocks [E=3, out=6, G=4, 16]: the logical tensor is [E, in, out] = [3, 128, 6]
    ct, key = write_case(
        tmp_path / "c", build, random_mx_data, "gpt-oss", (3, 6), 128, ("F4", "F8_E8M0"), 0
    )
    assert ct.entries[key].shape == (3, 128, 6)
    # experts 1, in 33..90 (blocks 1 and 2), out 3..5 (rows 3 and 4 of the blocks)
    target = TargetSlice((3, 128, 6), (1, 57, 2), (1, 33, 3), "bfloat16")
    plan = ct.plan(key, target)
    assert dict(plan.source_slices) == {
        "w_blocks": ((1, 3, 1, 0), (1, 2, 2, 32)),  # F4 headers count elements
        "w_scales": ((1, 3, 1), (1, 2, 2)),
    }
    before = ct.checkpoint.bytes_read
    local = ct.decode(key, ct.read_sources(plan), plan, "float32")
    assert ct.checkpoint.bytes_read - before == 2 * (2 * 16 + 2)
    whole = ct.load(key, "float32")
    np.testing.assert_array_equal(bits(local), bits(whole[1:2, 33:90, 3:5]))


def test_gpt_oss_experts_transpose_stored_rows_into_the_last_axis(
    tmp_path: Path,
    build: Build,
    random_mx_data: RandomMx,
    ref_decode: Callable[[np.ndarray, np.ndarray, int], np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast whole-block path (bands of a few rows, on the threads) and the general
    path give the reference decode with its last two axes swapped, into ``out`` too."""
    import flexq.formatkit.bands as bands

    monkeypatch.setattr(bands, "_BAND_CODES", 3 * 96)  # bands of 3 rows
    packed, scales = random_mx_data(np.random.default_rng(5), (2, 7), 96)
    want = ref_decode(packed, scales, 96).transpose(0, 2, 1)  # [E, in, out]
    ct, key = write_case(
        tmp_path / "c", build, random_mx_data, "gpt-oss", (2, 7), 96, ("U8", "U8"), 5
    )
    whole = TargetSlice.whole((2, 96, 7), "float32")
    plan = ct.plan(key, whole)
    sources = ct.read_sources(plan)
    into = np.full(whole.local_shape, 3.0, np.float32)
    for got in (ct.load(key, "float32"), ct.decode(key, sources, plan, "float32", into)):
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(bits(got)[~nan], bits(want)[~nan])
    for empty in ((0, 96, 7), (2, 0, 7), (2, 96, 0)):
        plan = ct.plan(key, TargetSlice((2, 96, 7), empty, (0, 0, 0), "float32"))
        assert ct.decode(key, ct.read_sources(plan), plan, "float32").shape == empty
    part = TargetSlice((2, 96, 7), (2, 50, 7), (0, 40, 0), "float32")  # starts inside a block
    plan = ct.plan(key, part)
    got = ct.decode(key, ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(bits(got), bits(ct.load(key, "float32")[:, 40:90]))


def test_force_global_gives_the_whole_tensor(
    tmp_path: Path, build: Build, random_mx_data: RandomMx
) -> None:
    ct, key = write_case(
        tmp_path / "c", build, random_mx_data, "gpt-oss", (4,), 64, ("U8", "U8"), 0
    )
    assert ct.entries[key].shape == (64, 4)  # [in, out]
    plan = ct.plan(key, TargetSlice((64, 4), (10, 2), (40, 2), "float32"), force_global=True)
    assert plan.mode == "global"
    assert plan.target.local_shape == (64, 4)
    out = ct.decode(key, ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(bits(out), bits(ct.load(key, "float32")))


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    layout = draw(st.sampled_from(["gpt-oss", "compressed-tensors"]))
    lead = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=2)))
    n = draw(st.integers(1, 4)) * 32 if layout == "gpt-oss" else draw(st.integers(1, 72)) * 2
    # gpt-oss experts are [..., in, out] = the stored [..., out, n] with its last two axes swapped
    blocked = -2 if layout == "gpt-oss" and lead else -1
    shape = (*lead[:-1], n, lead[-1]) if blocked == -2 else (*lead, n)
    return {
        "layout": layout,
        "lead": lead,
        "n": n,
        "blocked": blocked,
        "dtypes": draw(st.sampled_from([("U8", "U8"), ("F4", "F8_E8M0")])),
        **draw(box_case(shape)),
    }


@examples(60)
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
        local, sliced, read, plan, sources = local_and_whole(ct, key, case["offset"], case["local"])
        np.testing.assert_array_equal(bits(local), bits(sliced))
        # Per row: at most the covering blocks, i.e. ceil(size/32) + 1 blocks of 16 + 1 bytes.
        blocked = case["blocked"]
        rows = int(np.prod(case["local"])) // case["local"][blocked]
        assert read <= rows * (case["local"][blocked] // 32 + 2) * 17
        on_device = {k: paddle.to_tensor(v) for k, v in sources.items()}
        from_paddle = ct.decode(key, on_device, plan, "float32")
        np.testing.assert_array_equal(bits(from_paddle.numpy()), bits(local))
        ct.checkpoint.close()


@pytest.mark.parametrize("layout", ["gpt-oss", "compressed-tensors"])
def test_paddle_sources_through_the_load_transform_protocol_are_bit_identical(
    tmp_path: Path, build: Build, random_mx_data: RandomMx, layout: str
) -> None:
    n = 96 if layout == "gpt-oss" else 84  # 84: a partial last block
    ct, key = write_case(tmp_path / "c", build, random_mx_data, layout, (2, 5), n, ("U8", "U8"), 7)
    # Every block is touched, so the NaN (0xFF) and 2^-127 (0x00) scales are in the box.
    if layout == "gpt-oss":  # [E, in, out]
        target = TargetSlice((2, n, 5), (2, n - 13, 5), (0, 7, 0), "bfloat16")
    else:
        target = TargetSlice((2, 5, n), (2, 5, n - 13), (0, 0, 7), "bfloat16")
    plan = ct.read_plan(key, target)
    sources = ct.read_sources(plan)
    want32 = ct.decode(key, sources, plan, "float32")
    want16 = ct.decode(key, sources, plan, "bfloat16")
    on_device = {k: paddle.to_tensor(v) for k, v in sources.items()}
    got32 = ct.apply(key, on_device, paddle.float32)
    assert got32.place.is_cpu_place()
    np.testing.assert_array_equal(bits(got32.numpy()), bits(want32))
    got16 = ct.apply(key, on_device, "bfloat16")
    assert got16.dtype == paddle.bfloat16
    # Paddle's cast (in the core, after apply) and numpy's write NaNs differently.
    same_bfloat16(got16.view(paddle.uint16).numpy(), want16)
    assert ((want16 & 0x7FFF) > 0x7F80).any()  # the NaN scale is in the box
