"""The composed transform: ownership, passthrough, conflicts, plugin misbehaviour, protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import paddle
import pytest

import flexq
from flexq.errors import FormatError, PluginError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def registered() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for n in names:
        flexq.unregister_format(n)


def add(registered: list[str], plugin: object, name: str) -> None:
    flexq.register_format(plugin, name=name)
    registered.append(name)


def test_passthrough_tensors_keep_their_values(scaled_ckpt: Path, scaled_format: object) -> None:
    ct = flexq.compose(scaled_ckpt)
    assert ct.entries["norm"].is_passthrough
    assert ct.entries["norm"].dtype == "bfloat16"
    assert ct.source_keys("a") == ["a.q", "a.s"]
    np.testing.assert_array_equal(ct.load("norm"), np.array([0x3F80, 0xC000], np.uint16))
    np.testing.assert_array_equal(ct.load("norm", "float32"), np.array([1.0, -2.0], np.float32))


def test_protocol_read_plan_then_apply_returns_the_local_shard(
    scaled_ckpt: Path, scaled_format: object
) -> None:
    from paddle.distributed.flex_checkpoint.dcp.metadata import LocalTensorMetadata

    ct = flexq.compose(scaled_ckpt)
    meta = ct.logical_metadata()
    assert isinstance(meta["a"], LocalTensorMetadata)
    assert tuple(meta["a"].global_shape) == (3, 4)
    target = LocalTensorMetadata(
        global_offset=(1, 0), local_shape=(2, 4), dtype="bfloat16", global_shape=(3, 4)
    )
    plan = ct.read_plan("a", target)
    assert plan.mode == "local"
    assert dict(plan.source_slices) == {"a.q": ((1, 0), (2, 4)), "a.s": ((), ())}
    sources = {k: paddle.to_tensor(v) for k, v in ct.read_sources(plan).items()}
    out = ct.apply("a", sources, paddle.bfloat16)
    assert out.dtype == paddle.bfloat16
    expected = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)[1:] * 0.5
    np.testing.assert_array_equal(out.astype("float32").numpy(), expected)


def test_force_global_plans_read_whole_sources(scaled_ckpt: Path, scaled_format: object) -> None:
    ct = flexq.compose(scaled_ckpt)
    target = flexq.TargetSlice((3, 4), (1, 4), (2, 0), "float32")
    plan = ct.read_plan("a", target, force_global=True)
    assert plan.mode == "global"
    assert dict(plan.source_slices) == {"a.q": ((0, 0), (3, 4)), "a.s": ((), ())}


def test_two_formats_claiming_one_logical_tensor_is_an_error(
    scaled_ckpt: Path, scaled_format: object, registered: list[str]
) -> None:
    from .conftest import ScaledFormat

    add(registered, ScaledFormat(), "scaled-twin")
    with pytest.raises(PluginError, match="'a' is claimed by formats 'scaled' and 'scaled-twin'"):
        flexq.compose(scaled_ckpt)


def claiming(shapes: dict[str, tuple[int, ...]], sources: list[str]) -> object:
    """An inline format whose logical tensors (float32 of ``shapes``) are each built from
    ``sources``: to provoke the composer's checks of what formats claim."""

    class Claiming:
        @flexq.hookimpl
        def flexq_logical_metadata(self) -> dict[str, flexq.LogicalTensor]:
            return {k: flexq.LogicalTensor(shape, "float32") for k, shape in shapes.items()}

        @flexq.hookimpl
        def flexq_source_keys(self) -> list[str]:
            return sources

    return Claiming()


def test_a_component_used_by_two_logical_tensors_is_an_error(
    scaled_ckpt: Path, registered: list[str]
) -> None:
    add(registered, claiming({"x": (3, 4), "y": (3, 4)}, ["a.q", "a.s"]), "greedy")
    with pytest.raises(PluginError, match="'a.q' is a component of both 'x'"):
        flexq.compose(scaled_ckpt, formats=["greedy"])


def test_claiming_a_tensor_that_does_not_exist_names_the_plugin(
    scaled_ckpt: Path, registered: list[str]
) -> None:
    add(registered, claiming({"g": (1,)}, ["ghost.q"]), "ghost")
    with pytest.raises(PluginError, match="format 'ghost'.*'ghost.q', which is not in"):
        flexq.compose(scaled_ckpt, formats=["ghost"])


def test_orphaned_scale_is_an_error_and_inspect_mode_collects_it(
    scaled_ckpt: Path, registered: list[str]
) -> None:
    class OnlyRecognises:
        @flexq.hookimpl
        def flexq_recognized_keys(self) -> list[str]:
            return ["a.s"]

    add(registered, OnlyRecognises(), "recog")
    with pytest.raises(FormatError, match="'a.s' belongs to format 'recog'.*orphaned"):
        flexq.compose(scaled_ckpt, formats=["recog"])
    ct = flexq.compose(scaled_ckpt, formats=["recog"], strict=False)
    assert any("orphaned" in p for p in ct.problems)
    assert "a.q" in ct.entries  # the int8 tensor itself passes through


class Faulty:
    """Claims ``a`` and misbehaves in the hook named by ``where``."""

    def __init__(self, where: str, result: Any = None) -> None:
        self.where, self.result = where, result

    def _maybe(self, hook: str, value: Any) -> Any:
        if self.where != hook:
            return value
        if isinstance(self.result, str) and self.result == "raise":
            raise RuntimeError(f"boom in {hook}")
        return self.result

    @flexq.hookimpl
    def flexq_logical_metadata(self) -> Any:
        return self._maybe("metadata", {"a": flexq.LogicalTensor((3, 4), "float32")})

    @flexq.hookimpl
    def flexq_source_keys(self) -> Any:
        return self._maybe("source_keys", ["a.q", "a.s"])

    @flexq.hookimpl
    def flexq_read_plan(self, target: flexq.TargetSlice) -> Any:
        return self._maybe("read_plan", None)

    @flexq.hookimpl
    def flexq_apply(self, sources: dict[str, Any]) -> Any:
        return self._maybe("apply", np.zeros((3, 4), np.float32))


@pytest.mark.parametrize(
    ("where", "result", "message"),
    [
        ("metadata", "raise", "format 'faulty': flexq_logical_metadata raised RuntimeError: boom"),
        ("metadata", [1, 2], r"flexq_logical_metadata returned \[1, 2\] \(list\), not a mapping"),
        ("metadata", {"a": (3, 4)}, "entry .a. that is .*not a flexq.LogicalTensor"),
        ("source_keys", "raise", "flexq_source_keys raised"),
        ("source_keys", None, "no source keys for logical tensor 'a'"),
        ("read_plan", "raise", "flexq_read_plan raised"),
        ("read_plan", {"mode": "local"}, "not a flexq.ReadPlan"),
        ("apply", "raise", "flexq_apply raised RuntimeError"),
        ("apply", None, "flexq_apply returned NoneType for 'a', not an array"),
        ("apply", np.zeros((4, 3), np.float32), r"returned shape \(4, 3\), expected \(3, 4\)"),
    ],
)
def test_misbehaving_plugins_get_plugin_errors_naming_them(
    scaled_ckpt: Path, registered: list[str], where: str, result: Any, message: str
) -> None:
    add(registered, Faulty(where, result), "faulty")
    with pytest.raises(PluginError, match=message):
        flexq.compose(scaled_ckpt, formats=["faulty"]).load("a")


def test_plan_outside_the_source_is_rejected(scaled_ckpt: Path, registered: list[str]) -> None:
    bad = flexq.ReadPlan(
        "local", {"a.q": ((2, 0), (5, 4))}, flexq.TargetSlice.whole((3, 4), "float32")
    )
    add(registered, Faulty("read_plan", bad), "faulty")
    with pytest.raises(PluginError, match="outside its shape"):
        flexq.compose(scaled_ckpt, formats=["faulty"]).load("a")


def test_element_format_nobody_decodes_is_a_problem(tmp_path: Path) -> None:
    path = flexq.save_checkpoint(
        tmp_path / "c", {"w": flexq.RawTensor("F8_E4M3", np.zeros((2, 2), np.uint8))}
    )
    with pytest.raises(FormatError, match="'w' has element format F8_E4M3, which no format"):
        flexq.compose(path, formats=[])
