"""Local read plans: any box of an FP8 weight, read with only the bytes it needs.

Property (hypothesis): for random shapes, layouts, block sizes and boxes, the
local-plan result equals the same box of the global result and of the
reference (in float32, and in bfloat16 decoded into a target's memory), and the
bytes read are the box's weight bytes plus the covering scale blocks, within the
box's rows/columns plus one block on each side.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flexq
from flexq import RawTensor, TargetSlice
from flexq.plan import block_cover
from flexq.testing import planned_box
from flexq.testing.strategies import box_in
from flexq_fp8.decode import dequantize
from flexq_fp8.layout import Fp8Layout

ITEMSIZE = {"F32": 4, "BF16": 2, "F16": 2, "U8": 1, "F8_E8M0": 1}


@dataclass(frozen=True)
class Example:
    shape: tuple[int, ...]
    block: tuple[int, ...]
    scale_dtype: str
    offset: tuple[int, ...]
    size: tuple[int, ...]
    seed: int


@st.composite
def examples(draw: st.DrawFn) -> Example:
    experts = draw(st.sampled_from([(), (1,), (3,)]))
    out, inp = draw(st.integers(1, 96)), draw(st.integers(1, 96))
    layout = draw(st.sampled_from(["tensor", "channel", "group", "block"]))
    if layout == "tensor":
        last: tuple[int, int] = (out, inp)
    elif layout == "channel":
        last = (1, inp)
    elif layout == "group":
        last = (1, draw(st.integers(1, 40)))
    else:
        last = (draw(st.integers(1, 40)), draw(st.integers(1, 40)))
    shape = (*experts, out, inp)
    block = (1,) * len(experts) + last
    offset, size = draw(box_in(shape))
    scale_dtype = draw(st.sampled_from(sorted(ITEMSIZE)))
    return Example(shape, block, scale_dtype, offset, size, draw(st.integers(0, 9)))


def write(
    ex: Example, path: Path, make_codes: Any, make_scale: Any
) -> tuple[np.ndarray, RawTensor]:
    rng = np.random.default_rng(ex.seed)
    grid = [-(-n // b) for n, b in zip(ex.shape, ex.block, strict=True)]
    codes = make_codes(rng, ex.shape)
    scale = make_scale(rng, grid, ex.scale_dtype)
    qc = {"quant_method": "fp8", "weight_block_size": list(ex.block[-2:])}
    flexq.save_checkpoint(
        path,
        {"w": RawTensor("F8_E4M3", codes), "w_scale_inv": scale},
        config={"quantization_config": qc},
        shard_of={"w_scale_inv": 1},
    )
    return codes, scale


@settings(max_examples=100, deadline=None)
@given(ex=examples())
def test_local_plan_equals_slice_of_global_and_reads_only_covering_bytes(
    ex: Example,
    make_codes: Callable[..., np.ndarray],
    make_scale: Callable[..., RawTensor],
    reference: Callable[..., np.ndarray],
    rounder: Callable[[np.ndarray, str], np.ndarray],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        codes, scale = write(ex, Path(tmp), make_codes, make_scale)
        ct = flexq.compose(tmp, formats=["fp8"])
        target = TargetSlice(ex.shape, ex.size, ex.offset, "float32")
        plan = ct.plan("w", target)
        assert plan.mode == "local"
        assert plan.target == target
        before = ct.checkpoint.bytes_read_by_file.copy()
        sources = ct.read_sources(plan)
        delta = ct.checkpoint.bytes_read_by_file - before
        local = ct.decode("w", sources, plan, "float32")
        whole = ct.load("w", "float32")
        box = tuple(slice(o, o + n) for o, n in zip(ex.offset, ex.size, strict=True))
        np.testing.assert_array_equal(local.view(np.uint32), whole[box].view(np.uint32))
        want = reference(codes, scale, ex.block)[box]
        np.testing.assert_array_equal(local.view(np.uint32), want.view(np.uint32))
        # Into a bfloat16 target's memory, as a load decodes: the format rounds into it
        # itself (BoxSources.rounded_out; one scale by its table, else band by band), so
        # the core's float32 scratch is never written.
        plan16 = ct.plan("w", TargetSlice(ex.shape, ex.size, ex.offset, "bfloat16"))
        into = np.zeros(ex.size, np.uint16)
        work = np.full(ex.size, np.nan, np.float32)
        ct.decode("w", ct.read_sources(plan16), plan16, "bfloat16", out=into, scratch=work)
        np.testing.assert_array_equal(into, rounder(want, "bfloat16"))
        assert np.isnan(work).all()

        weight_file = ct.checkpoint.info("w").file
        scale_file = ct.checkpoint.info("w_scale_inv").file
        # the weight box exactly, never a byte more
        assert delta[weight_file] == math.prod(ex.size)
        covering = [
            block_cover(o, n, b, d)[1]
            for o, n, b, d in zip(ex.offset, ex.size, ex.block, ex.shape, strict=True)
        ]
        assert delta[scale_file] == math.prod(covering) * ITEMSIZE[ex.scale_dtype]
        # the bound of the issue: box rows/columns plus one block on each side
        padded = [min(n + 2 * b, d) for n, b, d in zip(ex.size, ex.block, ex.shape, strict=True)]
        assert delta[weight_file] <= math.prod(padded)
        assert math.prod(covering) <= math.prod(
            -(-p // b) + 1 for p, b in zip(padded, ex.block, strict=True)
        )


@pytest.fixture
def block_ckpt(
    tmp_path: Path, make_codes: Callable[..., np.ndarray], make_scale: Callable[..., RawTensor]
) -> flexq.ComposedTransform:
    """A [300, 260] FP8 weight ``w`` with 128x128 blocks (F32 scales [3, 3]), composed."""
    rng = np.random.default_rng(7)
    flexq.save_checkpoint(
        tmp_path,
        {
            "w": RawTensor("F8_E4M3", make_codes(rng, (300, 260))),
            "w_scale_inv": make_scale(rng, (3, 3), "F32"),
        },
        config={"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
    )
    return flexq.compose(tmp_path, formats=["fp8"])


#: a box of the 300x260 weight with 128x128 blocks -> the reads its plan makes.
BLOCK_BOXES = [
    pytest.param(
        # tensor parallel with 64-row shards over 128-row blocks: rank 1 holds rows 64..127
        TargetSlice((300, 260), (64, 260), (64, 0), "bfloat16"),
        {"w": ((64, 0), (64, 260)), "w_scale_inv": ((0, 0), (1, 3))},
        id="shard smaller than a block reads one scale block",
    ),
    pytest.param(
        # rows 100..299 touch blocks 0, 1, 2; columns 250..259 the end of block 1 and
        # the partial edge block 2 (columns 256..259)
        TargetSlice((300, 260), (200, 10), (100, 250), "float32"),
        {"w": ((100, 250), (200, 10)), "w_scale_inv": ((0, 1), (3, 2))},
        id="box starting and ending inside blocks covers both edge blocks",
    ),
]


@pytest.mark.parametrize(("target", "reads"), BLOCK_BOXES)
def test_a_box_reads_the_scale_blocks_that_cover_it(
    block_ckpt: flexq.ComposedTransform, target: TargetSlice, reads: dict[str, Any]
) -> None:
    assert planned_box(block_ckpt, "w", target, block_ckpt.load("w", "float32")) == reads


def test_force_global_reads_whole_sources(block_ckpt: flexq.ComposedTransform) -> None:
    ct = block_ckpt
    plan = ct.plan("w", TargetSlice((300, 260), (64, 260), (64, 0), "float32"), force_global=True)
    assert plan.mode == "global"
    assert plan.target == TargetSlice.whole((300, 260), "float32")
    assert plan.source_slices == {"w": ((0, 0), (300, 260)), "w_scale_inv": ((0, 0), (3, 3))}
    got = ct.decode("w", ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(got.view(np.uint32), ct.load("w", "float32").view(np.uint32))


def test_per_tensor_scalar_scale_is_read_whole_for_any_box(tmp_path: Path) -> None:
    codes = np.full((40, 30), 0x38, np.uint8)  # 1.0
    flexq.save_checkpoint(
        tmp_path,
        {"w": RawTensor("F8_E4M3", codes), "w_scale": RawTensor.of(np.array(0.75, np.float32))},
    )
    ct = flexq.compose(tmp_path, formats=["fp8"])
    plan = ct.plan("w", TargetSlice((40, 30), (5, 7), (33, 20), "float32"))
    assert plan.source_slices["w_scale"] == ((), ())
    got = ct.decode("w", ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(got, np.full((5, 7), 0.75, np.float32))


def test_empty_box_reads_nothing_and_gives_an_empty_result(
    block_ckpt: flexq.ComposedTransform,
) -> None:
    ct = block_ckpt
    plan = ct.plan("w", TargetSlice((300, 260), (0, 260), (300, 0), "float32"))
    before = ct.checkpoint.bytes_read
    got = ct.decode("w", ct.read_sources(plan), plan, "float32")
    assert ct.checkpoint.bytes_read == before
    assert got.shape == (0, 260)


@pytest.mark.parametrize(
    ("offset", "size"),
    [
        ((0, 0), (1000, 600)),  # whole blocks plus a partial edge block row
        ((37, 0), (900, 600)),  # starts and ends inside block rows
        ((128, 5), (384, 590)),  # whole block rows, columns cut inside blocks
        ((300, 0), (500, 1)),  # one column
    ],
)
def test_large_block_boxes_match_the_reference_through_every_row_segment(
    offset: tuple[int, int],
    size: tuple[int, int],
    make_codes: Callable[..., np.ndarray],
    make_scale: Callable[..., RawTensor],
    reference: Callable[..., np.ndarray],
) -> None:
    # Big enough that each part (partial first block row, whole block rows,
    # partial last one) goes through the threaded pair-table lookup.
    rng = np.random.default_rng(11)
    shape, block = (1000, 600), (128, 128)
    codes = make_codes(rng, shape)
    scale = make_scale(rng, (8, 5), "F32")
    layout = Fp8Layout("w", "w_scale_inv", "F32", shape, block, (8, 5), "float32")
    grid_offset, grid_shape = layout.grid_cover(offset, size)
    s_off, s_shape = layout.scale_box(grid_offset, grid_shape)
    box = tuple(slice(o, o + n) for o, n in zip(offset, size, strict=True))
    s_box = tuple(slice(o, o + n) for o, n in zip(s_off, s_shape, strict=True))
    want = reference(codes, scale, block)[box]
    got = dequantize(layout, codes[box], scale.data[s_box], offset, size)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    into = np.full(size, 7.0, np.float32)
    assert dequantize(layout, codes[box], scale.data[s_box], offset, size, out=into) is into
    np.testing.assert_array_equal(into.view(np.uint32), want.view(np.uint32))
