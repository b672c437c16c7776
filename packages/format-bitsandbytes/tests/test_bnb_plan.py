"""Local read plans: exact boxes, local == slice of global, bounded reads, and the Paddle path."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import paddle
from hypothesis import given
from hypothesis import strategies as st

import flexq
from flexq import TargetSlice
from flexq.testing import local_and_whole, planned_box
from flexq.testing.strategies import any_shape, box_case, examples

FORMATS = ["bitsandbytes"]
Build = Callable[..., Path]
KEY = "m.weight"


def test_aligned_row_range_reads_exactly_its_blocks(tmp_path: Path, build: Build, kit: Any) -> None:
    case = kit.random_4bit(np.random.default_rng(0), (8, 128), "nf4", 64, True, 4)
    ct = flexq.compose(build(tmp_path / "c", kit.tensors_4bit(KEY, case)), formats=FORMATS)
    plan = ct.plan(KEY, TargetSlice((8, 128), (4, 128), (4, 0), "float32"))
    assert plan.mode == "local"
    blob = ct.checkpoint.info(KEY + ".quant_state.bitsandbytes__nf4").shape[0]
    # rows 4..8 = flat [512, 1024) = blocks 8..16 = bytes 256..512; nested groups 2..4.
    assert dict(plan.source_slices) == {
        KEY: ((256, 0), (256, 1)),
        KEY + ".absmax": ((8,), (8,)),
        KEY + ".quant_map": ((0,), (16,)),
        KEY + ".nested_absmax": ((2,), (2,)),
        KEY + ".nested_quant_map": ((0,), (256,)),
        KEY + ".quant_state.bitsandbytes__nf4": ((0,), (blob,)),
    }


def composed_4bit(
    tmp_path: Path, build: Build, kit: Any, seed: int, shape: tuple[int, int], quant_type: str
) -> tuple[dict[str, Any], flexq.ComposedTransform]:
    """A checkpoint of one random 4-bit tensor ``KEY`` (blocks of 64, not nested), composed."""
    case = kit.random_4bit(np.random.default_rng(seed), shape, quant_type, 64, False)
    ct = flexq.compose(build(tmp_path / "c", kit.tensors_4bit(KEY, case)), formats=FORMATS)
    return case, ct


def test_unaligned_rows_read_one_covering_block_at_each_end(
    tmp_path: Path, build: Build, kit: Any
) -> None:
    case, ct = composed_4bit(tmp_path, build, kit, 1, (10, 40), "fp4")
    before = ct.checkpoint.bytes_read
    target = TargetSlice((10, 40), (3, 40), (2, 0), "float32")
    reads = planned_box(ct, KEY, target, kit.reference_4bit(case))  # the bits of rows 2..5
    # rows 2..5 = flat [80, 200) -> blocks 1..4 (elements [64, 256)) -> bytes [32, 128).
    assert reads[KEY] == ((32, 0), (96, 1))
    assert reads[KEY + ".absmax"] == ((1,), (3,))
    blob = ct.checkpoint.info(KEY + ".quant_state.bitsandbytes__fp4").shape[0]
    assert ct.checkpoint.bytes_read - before == 96 + 3 * 4 + 16 * 4 + blob


def test_column_slice_reads_the_whole_rows_of_its_box(
    tmp_path: Path, build: Build, kit: Any
) -> None:
    # The documented limit: blocks run along flattened rows, so columns are not local.
    case, ct = composed_4bit(tmp_path, build, kit, 2, (6, 64), "nf4")
    target = TargetSlice((6, 64), (6, 32), (0, 32), "float32")
    assert planned_box(ct, KEY, target, kit.reference_4bit(case))[KEY] == ((0, 0), (192, 1))


def test_int8_plan_is_the_box_and_its_rows_scales(tmp_path: Path, build: Build, kit: Any) -> None:
    cb, scb = kit.random_int8(np.random.default_rng(3), 8, 20)
    ct = flexq.compose(build(tmp_path / "c", kit.tensors_int8("m", cb, scb)), formats=FORMATS)
    plan = ct.plan(KEY, TargetSlice((8, 20), (3, 7), (4, 10), "float32"))
    assert dict(plan.source_slices) == {
        KEY: ((4, 10), (3, 7)),
        "m.SCB": ((4,), (3,)),
        "m.weight_format": ((), ()),
    }
    local = ct.decode(KEY, ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(
        kit.bits(local), kit.bits(kit.reference_int8(cb, scb)[4:7, 10:17])
    )


def test_force_global_gives_the_whole_tensor(tmp_path: Path, build: Build, kit: Any) -> None:
    case = kit.random_4bit(np.random.default_rng(4), (5, 30), "nf4", 32, True, 2)
    ct = flexq.compose(build(tmp_path / "c", kit.tensors_4bit(KEY, case)), formats=FORMATS)
    plan = ct.plan(KEY, TargetSlice((5, 30), (2, 10), (2, 5), "float32"), force_global=True)
    assert plan.mode == "global"
    out = ct.decode(KEY, ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(kit.bits(out), kit.bits(kit.reference_4bit(case)))


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    shape = draw(any_shape(side=12, row=300))
    return {
        "shape": shape,
        "quant_type": draw(st.sampled_from(["nf4", "fp4"])),
        "blocksize": draw(st.sampled_from([1, 3, 8, 16, 64, 128])),
        "nested": draw(st.booleans()),
        "nested_blocksize": draw(st.sampled_from([1, 2, 5, 256])),
        **draw(box_case(shape)),
    }


@examples(80)
@given(case=cases())
def test_local_plan_equals_the_slice_of_the_global_result_within_the_read_bound(
    case: dict[str, Any], build: Build, kit: Any
) -> None:
    data = kit.drawn_4bit(case)
    with tempfile.TemporaryDirectory() as tmp:
        ct = flexq.compose(build(Path(tmp) / "c", kit.tensors_4bit(KEY, data)), formats=FORMATS)
        local, sliced, read, plan, sources = local_and_whole(ct, KEY, case["offset"], case["local"])
        np.testing.assert_array_equal(kit.bits(local), kit.bits(sliced))
        # The box's rows plus one block at each end: codes, absmax (4 or 1 bytes each),
        # nested absmax of those blocks' groups plus one at each end, both code books,
        # and the quant-state blob.
        bs = case["blocksize"]
        elements = case["local"][0] * math.prod(case["shape"][1:])
        blocks = elements // bs + 2
        blob = ct.checkpoint.info(KEY + ".quant_state.bitsandbytes__" + case["quant_type"])
        bound = (elements + 2 * bs) // 2 + 1 + blocks * (1 if case["nested"] else 4) + 64
        bound += blob.nbytes
        if case["nested"]:
            bound += (blocks // case["nested_blocksize"] + 2) * 4 + 1024
        assert read <= bound
        on_device = {k: paddle.to_tensor(v) for k, v in sources.items()}
        from_paddle = ct.decode(KEY, on_device, plan, "float32")
        np.testing.assert_array_equal(kit.bits(from_paddle.numpy()), kit.bits(local))
        ct.checkpoint.close()


@examples(30)
@given(
    rows=st.integers(1, 9),
    cols=st.integers(1, 30),
    data=st.data(),
)
def test_int8_local_plan_reads_only_its_box(
    rows: int, cols: int, data: st.DataObject, build: Build, kit: Any
) -> None:
    r0 = data.draw(st.integers(0, rows - 1))
    c0 = data.draw(st.integers(0, cols - 1))
    nr, nc = data.draw(st.integers(1, rows - r0)), data.draw(st.integers(1, cols - c0))
    cb, scb = kit.random_int8(np.random.default_rng(rows * 100 + cols), rows, cols)
    with tempfile.TemporaryDirectory() as tmp:
        ct = flexq.compose(build(Path(tmp) / "c", kit.tensors_int8("m", cb, scb)), formats=FORMATS)
        plan = ct.plan(KEY, TargetSlice((rows, cols), (nr, nc), (r0, c0), "float32"))
        before = ct.checkpoint.bytes_read
        sources = ct.read_sources(plan)
        assert ct.checkpoint.bytes_read - before == nr * nc + nr * 4 + 1
        local = ct.decode(KEY, sources, plan, "float32")
        want = kit.reference_int8(cb, scb)[r0 : r0 + nr, c0 : c0 + nc]
        np.testing.assert_array_equal(kit.bits(local), kit.bits(want))
        on_device = {k: paddle.to_tensor(v) for k, v in sources.items()}
        np.testing.assert_array_equal(
            kit.bits(ct.decode(KEY, on_device, plan, "float32").numpy()), kit.bits(local)
        )
        ct.checkpoint.close()
