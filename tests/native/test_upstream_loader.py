"""What Paddle's ``load_state_dict(..., load_transform=...)`` does with a transform.

These pin down the loader the native tests run against (the real one when
installed, else :mod:`tests.native.upstream`) with a toy transform, written
from upstream's own tests and the facts in notes/paddle.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest
from paddle.distributed.flex_checkpoint.dcp.metadata import LocalTensorMetadata
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq
from flexq.compose import ComposedTransform

from .conftest import Loader, symlink_copy
from .upstream import METADATA_NAME

QUANT, SCALE = "weight.quant", "weight.scale"
PAYLOAD = np.arange(32, dtype=np.uint8).reshape(4, 8)


@dataclass(frozen=True)
class Plan:
    mode: str
    source_slices: dict[str, Any] = field(default_factory=dict)


class Dequant:
    """One logical ``weight`` = payload (one-byte codes taken as integers) x scale."""

    def __init__(self, dtype: str = "float32", slices: dict[str, Any] | None = None) -> None:
        self.dtype = dtype
        self.slices = slices
        self.calls: list[tuple[str, Any]] = []

    def logical_metadata(self) -> dict[str, LocalTensorMetadata]:
        return {"weight": LocalTensorMetadata((0, 0), (4, 8), self.dtype, (4, 8))}

    def source_keys(self, logical_key: str) -> list[str]:
        return [QUANT, SCALE]

    def read_plan(self, logical_key: str, target: Any, force_global: bool = False) -> Plan:
        self.calls.append(("read_plan", force_global))
        return Plan("global") if self.slices is None else Plan("local", self.slices)

    def apply(self, logical_key: str, sources: dict[str, Any], output_dtype: Any) -> Any:
        self.calls.append(("apply", output_dtype))
        q = sources[QUANT]
        assert q.dtype == paddle.uint8, q.dtype  # one-byte formats travel as raw bytes
        return (q.astype("float32") * sources[SCALE].astype("float32")).astype(output_dtype)


@pytest.fixture
def fp8_ckpt(tmp_path: Path) -> Path:
    tensors = {
        QUANT: flexq.RawTensor("F8_E4M3", PAYLOAD),
        SCALE: flexq.RawTensor.of(np.array([2.0], dtype=np.float32)),
    }
    return flexq.save_checkpoint(tmp_path / "fp8", tensors)


def sharded(key: str, dtype: str = "float32") -> ShardedWeight:
    return ShardedWeight(key, paddle.zeros([4, 8], dtype=dtype), (4, 8), (4, 8), (0, 0))


def test_f8_bytes_reach_apply_untouched_and_metadata_is_written_into_the_path(
    paddle_load: Loader, fp8_ckpt: Path
) -> None:
    target = sharded("weight")
    transform = Dequant()
    paddle_load({"weight": target}, str(fp8_ckpt), safetensors=True, load_transform=transform)
    np.testing.assert_array_equal(target.local_tensor.numpy(), PAYLOAD * 2.0)
    assert transform.calls == [("read_plan", False), ("apply", paddle.float32)]
    assert (fp8_ckpt / METADATA_NAME).is_file()


def test_local_plan_values_are_read_as_attributes(
    paddle_load: Loader, fp8_ckpt: Path, tmp_path: Path
) -> None:
    boxes = {QUANT: ((0, 0), (4, 8)), SCALE: ((0,), (1,))}
    with pytest.raises(AttributeError, match="'tuple' object has no attribute"):
        paddle_load(
            {"weight": sharded("weight")},
            str(symlink_copy(fp8_ckpt, tmp_path / "a")),
            safetensors=True,
            load_transform=Dequant(slices=boxes),
        )
    metadata = {
        key: LocalTensorMetadata(offset, shape, "uint8", shape)
        for key, (offset, shape) in boxes.items()
    }
    target = sharded("weight")
    paddle_load(
        {"weight": target},
        str(symlink_copy(fp8_ckpt, tmp_path / "b")),
        safetensors=True,
        load_transform=Dequant(slices=metadata),
    )
    np.testing.assert_array_equal(target.local_tensor.numpy(), PAYLOAD * 2.0)


def test_apply_gets_the_logical_dtype_and_the_assign_takes_it_over(
    paddle_load: Loader, fp8_ckpt: Path
) -> None:
    """A float32 target handed a bfloat16 result silently becomes bfloat16."""
    target = paddle.zeros([4, 8], dtype="float32")
    transform = Dequant(dtype="bfloat16")
    paddle_load({"weight": target}, str(fp8_ckpt), safetensors=True, load_transform=transform)
    assert transform.calls[-1] == ("apply", paddle.bfloat16)
    assert target.dtype == paddle.bfloat16


def test_aoa_refuses_a_logical_dtype_the_statement_does_not_cast(
    paddle_load: Loader, fp8_ckpt: Path
) -> None:
    target = sharded("renamed", "float32")
    cfg = {"aoa_statements": ["weight -> renamed"]}
    with pytest.raises(AssertionError, match="different types is prohibited"):
        paddle_load(
            {"renamed": target},
            str(fp8_ckpt),
            aoa_config=cfg,
            safetensors=True,
            load_transform=Dequant(dtype="bfloat16"),
        )
    cfg = {"aoa_statements": ["weight -> renamed, dtype='float32'"]}
    paddle_load(
        {"renamed": target},
        str(fp8_ckpt),
        aoa_config=cfg,
        safetensors=True,
        load_transform=Dequant(dtype="bfloat16"),
    )
    np.testing.assert_array_equal(target.local_tensor.numpy(), PAYLOAD * 2.0)


def test_targets_split_by_aoa_are_planned_global(
    paddle_load: Loader, int8row_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fused_qkv with 2 key-value groups interleaves [q0 k0 v0 q1 k1 v1]: each of q, k, v
    feeds two boxes, so its targets disagree and Paddle asks for a global plan."""
    asked: list[tuple[str, bool]] = []
    real = ComposedTransform.read_plan

    def spy(self: Any, key: str, target: Any, force_global: bool = False) -> Any:
        asked.append((key, force_global))
        return real(self, key, target, force_global)

    monkeypatch.setattr(ComposedTransform, "read_plan", spy)
    q, k, v = (f"model.layers.0.self_attn.{p}_proj.weight" for p in "qkv")
    cfg = {
        "aoa_statements": [
            f"{q}^T -> tq",
            f"{k}^T -> tk",
            f"{v}^T -> tv",
            "tq, tk, tv -> qkv, fused_qkv, num_heads=2, num_key_value_groups=2",
        ]
    }
    target = ShardedWeight("qkv", paddle.zeros([64, 192]), (64, 192), (64, 192), (0, 0))
    paddle_load(
        {"qkv": target},
        str(symlink_copy(int8row_ckpt, int8row_ckpt.parent / "view")),
        aoa_config=cfg,
        safetensors=True,
        load_transform=flexq.compose(int8row_ckpt),
    )
    assert sorted(asked) == [(k, True), (q, True), (v, True)]
    want = paddle.zeros([64, 192])
    flexq.load_state_dict({"qkv": want}, int8row_ckpt, aoa_config=cfg, engine="direct")
    np.testing.assert_array_equal(target.local_tensor.numpy(), want.numpy())


def test_a_component_named_like_a_passthrough_target_is_refused(
    paddle_load: Loader, fp8_ckpt: Path
) -> None:
    state = {"weight": sharded("weight"), QUANT: sharded(QUANT, "uint8")}
    with pytest.raises(ValueError, match=QUANT):
        paddle_load(state, str(fp8_ckpt), safetensors=True, load_transform=Dequant())


def test_a_storage_format_paddle_has_no_dtype_for_is_refused_by_name(
    paddle_load: Loader, tmp_path: Path
) -> None:
    import flexq_mxfp4

    w = np.random.default_rng(2).standard_normal((64, 96)).astype(np.float32)
    tensors = flexq_mxfp4.quantize({"m.w": w}, packed_dtype="F4", scale_dtype="F8_E8M0")
    ckpt = flexq.save_checkpoint(tmp_path / "f4", tensors)
    with pytest.raises(ValueError, match="F4"):
        paddle_load(
            {"m.w": paddle.zeros([64, 96])},
            str(ckpt),
            safetensors=True,
            load_transform=flexq.compose(ckpt),
        )
