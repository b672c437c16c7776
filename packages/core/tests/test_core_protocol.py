"""The composed transform as upstream Paddle's loader calls it (PR #79712 at 1df2c128).

Paddle reads plan values as ``.global_offset`` / ``.local_shape``, asks for a
global plan for every key whose targets disagree, asks ``read_plan_for`` before
apply() and passes apply() the logical dtype, then assigns the result into the
target (which takes over the result's dtype).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import paddle
from paddle.distributed.flex_checkpoint.dcp.metadata import LocalTensorMetadata

import flexq
from flexq.plan import SourceSlice

Q = np.arange(-6, 6, dtype=np.float32).reshape(3, 4) * 0.5
NORM = np.array([1.0, -2.0], dtype=np.float32)


def test_plan_values_read_as_pairs_and_as_attributes(
    scaled_ckpt: Path, scaled_format: object
) -> None:
    ct = flexq.compose(scaled_ckpt)
    plan = ct.read_plan("a", LocalTensorMetadata((1, 0), (2, 4), "float32", (3, 4)))
    q = plan.source_slices["a.q"]
    assert isinstance(q, SourceSlice)
    assert (q.global_offset, q.local_shape) == ((1, 0), (2, 4))
    offset, shape = q
    assert (offset, shape) == ((1, 0), (2, 4))
    assert plan.source_slices["a.s"] == ((), ())
    made = flexq.ReadPlan("local", {"x": ((0,), (2,))}, plan.target)
    assert isinstance(made.source_slices["x"], SourceSlice)
    assert made.source_slices["x"].local_shape == (2,)


def test_force_global_makes_every_plan_global_passthrough_and_whole_targets_too(
    scaled_ckpt: Path, scaled_format: object
) -> None:
    ct = flexq.compose(scaled_ckpt)
    part = LocalTensorMetadata((1,), (1,), "bfloat16", (2,))
    plan = ct.read_plan("norm", part, force_global=True)
    assert plan.mode == "global"
    assert dict(plan.source_slices) == {"norm": ((0,), (2,))}
    assert ct.read_plan("norm", part).mode == "local"
    whole = LocalTensorMetadata((0, 0), (3, 4), "float32", (3, 4))
    assert ct.read_plan("a", whole, force_global=True).mode == "global"


def test_read_plan_for_is_the_plan_read_plan_made(scaled_ckpt: Path, scaled_format: object) -> None:
    ct = flexq.compose(scaled_ckpt)
    assert ct.read_plan_for("a") is None
    plan = ct.read_plan("a", LocalTensorMetadata((1, 0), (2, 4), "float32", (3, 4)))
    assert ct.read_plan_for("a") is plan


def test_apply_with_the_logical_dtype_produces_the_planned_targets_dtype(
    scaled_ckpt: Path, scaled_format: object
) -> None:
    """Paddle passes the logical dtype (float32 here) and assigns: a bfloat16 target
    keeps bfloat16, rounded once; a dtype asked for explicitly is honoured."""
    ct = flexq.compose(scaled_ckpt)
    plan = ct.read_plan("a", LocalTensorMetadata((1, 0), (2, 4), "bfloat16", (3, 4)))
    sources = {k: paddle.to_tensor(v) for k, v in ct.read_sources(plan).items()}
    out = ct.apply("a", sources, paddle.float32)
    assert out.dtype == paddle.bfloat16
    np.testing.assert_array_equal(out.astype("float32").numpy(), Q[1:])
    assert ct.apply("a", sources, paddle.float16).dtype == paddle.float16
    plan = ct.read_plan("norm", LocalTensorMetadata((0,), (2,), "float32", (2,)))
    norm = ct.apply("norm", ct.read_sources(plan), paddle.bfloat16)
    assert norm.dtype == paddle.float32
    np.testing.assert_array_equal(norm.numpy(), NORM)


def test_declaring_dtypes_changes_only_the_metadata_paddle_sees(
    scaled_ckpt: Path, scaled_format: object
) -> None:
    ct = flexq.compose(scaled_ckpt)
    view = ct.declaring({"a": "bfloat16"})
    assert view.logical_metadata()["a"].dtype == "bfloat16"
    assert ct.logical_metadata()["a"].dtype == "float32"
    assert view.entry("a").dtype == "float32"
    plan = view.read_plan("a", LocalTensorMetadata((0, 0), (3, 4), "bfloat16", (3, 4)))
    sources = {k: paddle.to_tensor(v) for k, v in view.read_sources(plan).items()}
    out = view.apply("a", sources, paddle.bfloat16)
    assert out.dtype == paddle.bfloat16
    np.testing.assert_array_equal(out.astype("float32").numpy(), Q)
