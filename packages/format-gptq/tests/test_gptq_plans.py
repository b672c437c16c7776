"""Local read plans: any box equals the same slice of the whole weight and reads only
its units of words, the group rows its columns use, and its g_idx slice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexq import ComposedTransform, TargetSlice, compose
from flexq.testing import check_local_box, planned_box
from flexq.testing.strategies import case_and_box

# (bits, out, in, group_size, g_idx kind, v1); boxes of every alignment are drawn over these.
CASES = [
    (4, 24, 64, 16, "trivial", True),
    (4, 32, 96, 32, "permuted", True),
    (4, 16, 40, -1, "none", False),
    (2, 32, 64, 16, "permuted", False),
    (3, 64, 96, 32, "permuted", True),
    (3, 32, 64, 24, "trivial", False),
    (8, 12, 48, 8, "random", True),
    (8, 8, 20, 3, "none", True),
]


class Built:
    """One checkpoint per case: its composed transform, whole result and tensors."""

    def __init__(self, oracle: Any, stack: Any) -> None:
        rng = np.random.default_rng(7)
        self.items: list[tuple[ComposedTransform, np.ndarray, Any]] = []
        for bits, out_f, in_f, group, kind, v1 in CASES:
            lin = oracle.random_gptq(rng, bits, out_f, in_f, group, v1=v1, g_idx=kind)
            act_order = kind in ("permuted", "random")
            config = oracle.gptq_config(bits, group, v1=v1, desc_act=act_order)
            ckpt = stack.enter_context(oracle.written({"fc": lin}, config))
            ct = compose(ckpt.path, ["gptq"])
            self.items.append((ct, ct.load("fc.weight", "float32"), lin))


@pytest.fixture(scope="module")
def built(oracle: Any) -> Iterator[Built]:
    from contextlib import ExitStack

    with ExitStack() as stack:
        yield Built(oracle, stack)


def expected_bytes(lin: Any, o0: int, no: int, i0: int, ni: int) -> int:
    """Bytes a local plan reads: covering units of words, the covering groups (every
    group under act-order), exact scale columns, the g_idx slice."""
    bits = lin.bits
    unit = 32 if bits == 3 else 32 // bits
    words = 3 if bits == 3 else 1
    in_f = lin.shape[1]

    def cover(start: int, size: int, block: int) -> int:
        return (start + size - 1) // block - start // block + 1

    g = in_f if lin.group_size == -1 else lin.group_size
    act_order = lin.g_idx is not None and not np.array_equal(lin.g_idx, np.arange(in_f) // g)
    ng = -(-in_f // g) if act_order else cover(i0, ni, g)
    g_idx = 4 * ni if lin.g_idx is not None else 0
    qweight = 4 * words * cover(i0, ni, unit) * no
    qzeros = 4 * words * cover(o0, no, unit) * ng
    return qweight + qzeros + 2 * ng * no + g_idx


@settings(max_examples=120, deadline=None)
@given(box=case_and_box([c[1:3] for c in CASES]), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_local_plan_equals_slice_of_global_and_reads_within_the_bound(
    built: Built, box: tuple[int, tuple[int, int], tuple[int, int]], dtype: str
) -> None:
    case, (o0, i0), (no, ni) = box
    ct, whole, lin = built.items[case]
    target = TargetSlice(lin.shape, (no, ni), (o0, i0), dtype)
    check_local_box(ct, "fc.weight", target, whole, expected_bytes(lin, o0, no, i0, ni))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_whole_weight_equals_the_oracle(built: Built, oracle: Any, case: int) -> None:
    _, whole, lin = built.items[case]
    oracle.same_bits(whole, lin.reference())


Slice = tuple[tuple[int, ...], tuple[int, ...]]


def fc_reads(qweight: Slice, qzeros: Slice, scales: Slice) -> dict[str, Slice]:
    """The (offset, shape) reads of linear ``fc``'s packed sources, keyed as a plan's."""
    return {"fc.qweight": qweight, "fc.qzeros": qzeros, "fc.scales": scales}


#: a case of CASES, a box of its ``fc.weight`` -> the reads of its packed sources (its
#: ``fc.g_idx`` read is always the box's columns).
GIDX_BOXES = [
    pytest.param(
        1,  # 4 bits, out 32, in 96, g 32, permuted
        TargetSlice((32, 96), (10, 1), (8, 50), "float32"),
        fc_reads(((6, 8), (1, 10)), ((0, 1), (3, 2)), ((0, 8), (3, 10))),
        id="act-order reads every group row of its columns",
    ),
    pytest.param(
        0,  # 4 bits, out 24, in 64, g 16, g_idx = i // 16
        TargetSlice((24, 64), (24, 10), (0, 30), "float32"),
        fc_reads(((3, 0), (2, 24)), ((1, 0), (2, 3)), ((1, 0), (2, 24))),
        id="trivial g_idx reads only the covering groups",
    ),
]


@pytest.mark.parametrize(("case", "target", "reads"), GIDX_BOXES)
def test_a_g_idx_plan_reads_only_the_groups_its_columns_use(
    built: Built, case: int, target: TargetSlice, reads: dict[str, Any]
) -> None:
    ct, whole, _ = built.items[case]
    columns = ((target.global_offset[1],), (target.local_shape[1],))
    assert planned_box(ct, "fc.weight", target, whole) == {**reads, "fc.g_idx": columns}


def test_three_bit_row_slice_reads_whole_three_word_units(built: Built) -> None:
    ct, whole, _ = built.items[4]  # 3 bits, out 64, in 96, g 32
    plan = ct.plan("fc.weight", TargetSlice((64, 96), (20, 96), (30, 0), "float32"))
    qz_offset, qz_shape = plan.source_slices["fc.qzeros"]
    assert (qz_offset[1], qz_shape[1]) == (0, 6)  # out 30..49 -> units 0 and 1 -> words 0..5
    assert plan.source_slices["fc.qweight"] == ((0, 30), (9, 20))
    got = ct.decode("fc.weight", ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(got, whole[30:50])


def test_force_global_reads_whole_sources_and_returns_the_whole_weight(built: Built) -> None:
    ct, whole, _ = built.items[1]
    target = TargetSlice((32, 96), (5, 7), (3, 9), "float32")
    plan = ct.plan("fc.weight", target, force_global=True)
    assert plan.mode == "global"
    got = ct.decode("fc.weight", ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(got.view(np.uint32), whole.view(np.uint32))


@pytest.mark.parametrize("band", [1, 100, 1 << 18])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_whole_units_decode_band_by_band_into_a_given_output(
    built: Built, oracle: Any, case: int, band: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Boxes that are whole units of words take the banded path: bands of one output row
    up to the whole weight, over the worker threads, into a fresh array or the one offered."""
    import flexq.formatkit.bands as core_bands

    monkeypatch.setattr(core_bands, "_BAND_CODES", band)
    ct, _, lin = built.items[case]
    shape = lin.shape
    want = lin.reference()
    targets = [
        TargetSlice.whole(shape, "float32"),
        TargetSlice(shape, (shape[0] - 3, shape[1]), (3, 0), "float32"),
    ]
    for target in targets:
        plan = ct.plan("fc.weight", target)
        sources = ct.read_sources(plan)
        (o0, i0), (no, ni) = target.global_offset, target.local_shape
        oracle.same_bits(ct.decode("fc.weight", sources, plan, "float32"), want[o0 : o0 + no])
        into = np.full(target.local_shape, 5.0, np.float32)
        got = ct.decode("fc.weight", sources, plan, "float32", out=into)
        assert np.shares_memory(got, into)
        oracle.same_bits(into, want[o0 : o0 + no, i0 : i0 + ni])
