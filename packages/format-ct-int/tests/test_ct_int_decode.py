"""Whole and sliced decodes against the independent oracle, on random layouts.

Every property draws a layout (format, bits, strategy, group or block size,
symmetric or not, act-order, scale dtype, shape), writes it as a checkpoint
and loads it through the core: the whole weight must equal the oracle bit for
bit (float32, and bfloat16 after one rounding), any box must equal the same
slice of the whole result, and a local plan must read exactly the covering
words, scale blocks, zero-point words and g_idx entries.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from flexq import TargetSlice, compose
from flexq.testing.strategies import examples


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments of the oracle's ``random_case``."""
    fmt = draw(st.sampled_from(["pack-quantized", "int-quantized"]))
    bits = draw(st.sampled_from([4, 8, 4, 8, 2, 1, 3, 5, 6, 7])) if fmt == "pack-quantized" else 8
    strategy = draw(st.sampled_from(["group", "group", "channel", "tensor", "block"]))
    out_f = draw(st.integers(1, 40))
    group, block, act_order = 0, (1, 1), False
    if strategy == "group":
        group = draw(st.sampled_from([2, 4, 8, 16, 32, 128]))
        ngroups = draw(st.integers(1, 5))
        in_f = group * ngroups if draw(st.booleans()) or group > 32 else draw(st.integers(1, group))
        if in_f > group:
            in_f = group * ngroups
        act_order = draw(st.booleans())
    else:
        in_f = draw(st.integers(1, 90))
        if strategy == "block":
            block = (draw(st.integers(1, 12)), draw(st.integers(1, 24)))
    return dict(
        seed=draw(st.integers(0, 2**32 - 1)),
        fmt=fmt,
        bits=bits,
        strategy=strategy,
        shape=(out_f, in_f),
        group=group,
        block=block,
        symmetric=draw(st.booleans()),
        act_order=act_order,
        scale_dtype=draw(st.sampled_from(["BF16", "F16", "F32"])),
        dense=draw(st.booleans()),
    )


@st.composite
def boxes(draw: st.DrawFn, shape: tuple[int, int]) -> tuple[int, int, int, int]:
    out_f, in_f = shape
    o0 = draw(st.integers(0, out_f - 1))
    i0 = draw(st.integers(0, in_f - 1))
    return o0, draw(st.integers(1, out_f - o0)), i0, draw(st.integers(1, in_f - i0))


def cover(start: int, size: int, block: int) -> int:
    return (start + size - 1) // block - start // block + 1


def words(case: Any, start: int, size: int) -> int:
    """Words holding codes start..start+size of a packed row."""
    b: int = case.bits
    if case.dense or 8 % b == 0:
        return ((start + size) * b - 1) // 32 - (start * b) // 32 + 1
    return cover(start, size, 32 // b)


def planned_bytes(case: Any, o0: int, no: int, i0: int, ni: int) -> int:
    """What a local plan may read: the box rounded out to words and scale blocks."""
    b0, b1 = case.block
    item = {"BF16": 2, "F16": 2, "F32": 4}[case.scale_dtype]
    total = no * words(case, i0, ni) * 4 if case.fmt == "pack-quantized" else no * ni
    rows = cover(o0, no, b0)
    groups = -(-case.shape[1] // b1) if case.g_idx is not None else cover(i0, ni, b1)
    if case.strategy == "tensor":
        rows = groups = 1
    total += rows * groups * item
    if not case.symmetric:
        if case.fmt == "pack-quantized" and case.strategy in ("group", "channel"):
            total += words(case, o0, no) * groups * 4
        else:
            total += rows * groups
    if case.g_idx is not None:
        total += ni * 4
    if case.fmt == "pack-quantized":
        total += 16  # weight_shape, checked on every load
    return total


@examples(120)
@given(layout=layouts(), data=st.data())
def test_whole_and_sliced_decodes_match_the_oracle_and_read_only_covering_data(
    oracle: Any, layout: dict[str, Any], data: Any
) -> None:
    case = oracle.random_case(np.random.default_rng(layout.pop("seed")), **layout)
    with tempfile.TemporaryDirectory() as tmp:
        ct = compose(case.save(Path(tmp)), ["ct-int"])
        whole = ct.load("fc.weight", "float32")
        np.testing.assert_array_equal(whole.view(np.uint32), case.expected.view(np.uint32))
        np.testing.assert_array_equal(
            ct.load("fc.weight", "bfloat16"), oracle.round_to(case.expected, "bfloat16")
        )
        for _ in range(3):
            o0, no, i0, ni = data.draw(boxes(case.shape))
            target = TargetSlice(case.shape, (no, ni), (o0, i0), "float32")
            plan = ct.plan("fc.weight", target)
            assert plan.mode == "local"
            before = ct.checkpoint.bytes_read
            sources = ct.read_sources(plan)
            assert ct.checkpoint.bytes_read - before == planned_bytes(case, o0, no, i0, ni)
            got = ct.decode("fc.weight", sources, plan, "float32")
            np.testing.assert_array_equal(
                got.view(np.uint32), whole[o0 : o0 + no, i0 : i0 + ni].view(np.uint32)
            )
        ct.checkpoint.close()


def test_large_boxes_take_the_banded_path_into_the_offered_output(
    tmp_path: Path, oracle: Any
) -> None:
    # Enough rows for several bands and worker threads; boxes aligned and not.
    rng = np.random.default_rng(5)
    for n, (fmt, bits, sym) in enumerate(
        [("pack-quantized", 4, False), ("pack-quantized", 8, True), ("int-quantized", 8, False)]
    ):
        case = oracle.random_case(
            rng, fmt=fmt, bits=bits, strategy="group", shape=(1200, 512), group=128, symmetric=sym
        )
        ct = compose(case.save(tmp_path / str(n)), ["ct-int"])
        whole = ct.load("fc.weight", "float32")
        np.testing.assert_array_equal(whole, case.expected)
        for o0, no, i0, ni in [(0, 1200, 256, 256), (7, 900, 3, 301), (600, 600, 0, 512)]:
            target = TargetSlice((1200, 512), (no, ni), (o0, i0), "float32")
            plan = ct.plan("fc.weight", target)
            out = np.full((no, ni), np.nan, np.float32)
            got = ct.decode("fc.weight", ct.read_sources(plan), plan, "float32", out)
            assert np.shares_memory(got, out)
            np.testing.assert_array_equal(got, case.expected[o0 : o0 + no, i0 : i0 + ni])


def test_global_plans_read_whole_sources(tmp_path: Path, oracle: Any) -> None:
    rng = np.random.default_rng(9)
    case = oracle.random_case(
        rng, fmt="pack-quantized", bits=4, strategy="group", shape=(16, 64), group=16
    )
    ct = compose(case.save(tmp_path), ["ct-int"])
    plan = ct.plan("fc.weight", TargetSlice.whole((16, 64), "float32"), force_global=True)
    assert plan.mode == "global"
    np.testing.assert_array_equal(
        ct.decode("fc.weight", ct.read_sources(plan), plan, "float32"),
        case.expected,
    )
