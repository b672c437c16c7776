"""Local read plans: any box equals the same slice of the whole weight, reading only covering words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexq import ComposedTransform, TargetSlice, compose
from flexq.testing import check_local_box, planned_box
from flexq.testing.strategies import case_and_box

# (version, out, in, group_size); boxes of every alignment are drawn over these.
CASES = [
    *(("gemm", *shape) for shape in [(24, 64, 16), (40, 24, 8), (16, 96, 32), (32, 40, -1)]),
    *(("gemv", *shape) for shape in [(24, 128, 32), (16, 192, 64), (8, 256, 128), (12, 64, -1)]),
]


class Built:
    """One checkpoint per case, its composed transform, whole result and oracle."""

    def __init__(self, root: Path, oracle: Any) -> None:
        rng = np.random.default_rng(11)
        from flexq import save_checkpoint

        self.items: list[tuple[ComposedTransform, np.ndarray, Any]] = []
        for n, (version, out_f, in_f, group) in enumerate(CASES):
            awq = oracle.random_awq(rng, version, out_f, in_f, group)
            path = save_checkpoint(
                root / f"c{n}", awq.raw("fc"), config=oracle.awq_config(version, group)
            )
            ct = compose(path, ["int4-awq"])
            self.items.append((ct, ct.load("fc.weight", "float32"), awq))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, oracle: Any) -> Built:
    return Built(tmp_path_factory.mktemp("awq_plans"), oracle)


def expected_bytes(version: str, g: int, o0: int, no: int, i0: int, ni: int) -> int:
    """Bytes a local plan reads: covering int32 words, covering groups, exact scale columns."""

    def cover(start: int, size: int, block: int) -> int:
        return (start + size - 1) // block - start // block + 1

    ng = cover(i0, ni, g)
    if version == "gemm":
        nc = cover(o0, no, 8)
        return 4 * ni * nc + 4 * ng * nc + 2 * ng * no
    nz = cover(i0 // g, ng, 8)
    return 4 * no * cover(i0, ni, 8) + 4 * no * nz + 2 * no * ng


#: The (out, in) shape of every case, for drawing boxes.
SHAPES = [(out_f, in_f) for _, out_f, in_f, _ in CASES]


@settings(max_examples=100, deadline=None)
@given(box=case_and_box(SHAPES), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_local_plan_equals_slice_of_global_and_reads_only_covering_words(
    built: Built, box: tuple[int, tuple[int, int], tuple[int, int]], dtype: str
) -> None:
    case, (o0, i0), (no, ni) = box
    version, out_f, in_f, group = CASES[case]
    ct, whole, _ = built.items[case]
    target = TargetSlice((out_f, in_f), (no, ni), (o0, i0), dtype)
    g = in_f if group == -1 else group
    check_local_box(ct, "fc.weight", target, whole, expected_bytes(version, g, o0, no, i0, ni))


@settings(max_examples=25, deadline=None)
@given(box=case_and_box(SHAPES))
def test_paddle_sources_of_a_local_plan_match_numpy(
    built: Built, oracle: Any, box: tuple[int, tuple[int, int], tuple[int, int]]
) -> None:
    from flexq.testing import source_to_paddle

    case, (o0, i0), (no, ni) = box
    _, out_f, in_f, _ = CASES[case]
    ct, whole, _ = built.items[case]
    plan = ct.plan("fc.weight", TargetSlice((out_f, in_f), (no, ni), (o0, i0), "float32"))
    sources = ct.read_sources(plan)
    on_device = {k: source_to_paddle(v, ct.checkpoint.info(k).dtype) for k, v in sources.items()}
    got = ct.decode("fc.weight", on_device, plan, "float32")
    oracle.same_bits(got.numpy(), whole[o0 : o0 + no, i0 : i0 + ni])


@pytest.mark.parametrize("case", range(len(CASES)))
def test_whole_weight_equals_the_oracle(built: Built, oracle: Any, case: int) -> None:
    _, whole, awq = built.items[case]
    oracle.same_bits(whole, awq.reference())


def test_force_global_reads_whole_sources_and_returns_the_whole_weight(built: Built) -> None:
    ct, whole, _ = built.items[0]
    target = TargetSlice((24, 64), (5, 7), (3, 9), "float32")
    plan = ct.plan("fc.weight", target, force_global=True)
    assert plan.mode == "global"
    assert plan.source_slices["fc.qweight"] == ((0, 0), (64, 3))
    got = ct.decode("fc.weight", ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(got.view(np.uint32), whole.view(np.uint32))


Slice = tuple[tuple[int, ...], tuple[int, ...]]


def fc_reads(qweight: Slice, qzeros: Slice, scales: Slice) -> dict[str, Slice]:
    """The (offset, shape) reads of linear ``fc``'s packed sources, keyed as a plan's."""
    return {"fc.qweight": qweight, "fc.qzeros": qzeros, "fc.scales": scales}


#: gemm out=24 in=64 g=16: a box of ``fc.weight`` -> the reads its plan makes.
GEMM_BOXES = [
    pytest.param(
        TargetSlice((24, 64), (6, 64), (5, 0), "float32"),
        # out rows 5..10 live in packed columns 0 and 1; all 4 groups; scales exactly 5..10.
        fc_reads(((0, 0), (64, 2)), ((0, 0), (4, 2)), ((0, 5), (4, 6))),
        id="unaligned row slice reads the covering packed columns",
    ),
    pytest.param(
        TargetSlice((24, 64), (24, 10), (0, 30), "float32"),
        # in columns 30..39 = qweight rows 30..39; groups 1 and 2 (rows 16..47).
        fc_reads(((30, 0), (10, 3)), ((1, 0), (2, 3)), ((1, 0), (2, 24))),
        id="column slice reads qweight rows and whole groups",
    ),
]


@pytest.mark.parametrize(("target", "reads"), GEMM_BOXES)
def test_a_gemm_box_reads_only_what_covers_it(
    built: Built, target: TargetSlice, reads: dict[str, Any]
) -> None:
    ct, whole, _ = built.items[0]
    assert planned_box(ct, "fc.weight", target, whole) == reads


@pytest.mark.parametrize("band", [1, 200, 1 << 18])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_whole_boxes_decode_band_by_band_into_a_given_output(
    built: Built, oracle: Any, case: int, band: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Boxes that are exactly the planned words and whole groups take the banded
    path: bands of one source row up to the whole weight, over the worker
    threads, into a fresh array or the one offered (a target's memory)."""
    import flexq.formatkit.bands as core_ops

    monkeypatch.setattr(core_ops, "_BAND_CODES", band)
    ct, _, awq = built.items[case]
    shape = ct.entry("fc.weight").shape
    want = awq.reference()
    # the whole weight, and the rows after the first word's eight (a row shard)
    targets = [TargetSlice.whole(shape, "float32")]
    if shape[0] > 8:
        targets.append(TargetSlice(shape, (shape[0] - 8, shape[1]), (8, 0), "float32"))
    for target in targets:
        plan = ct.plan("fc.weight", target)
        sources = ct.read_sources(plan)
        box = tuple(
            slice(o, o + n) for o, n in zip(target.global_offset, target.local_shape, strict=True)
        )
        oracle.same_bits(ct.decode("fc.weight", sources, plan, "float32"), want[box])
        into = np.full(target.local_shape, 5.0, np.float32)
        got = ct.decode("fc.weight", sources, plan, "float32", out=into)
        assert np.shares_memory(got, into)
        oracle.same_bits(into, want[box])
