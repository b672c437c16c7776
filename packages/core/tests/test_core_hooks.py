"""One test per hook (``test_hook_<name>``), each through the registry's typed method, and
proof that the calls go through ``pm.hook`` where pluggy's tracing sees them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import flexq
from flexq.cli.main import main
from flexq.plugin import spec
from flexq.plugin.manager import registry

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from .conftest import ScaledFormat


HOOKS = {name for name in dir(spec) if name.startswith("flexq_")}


class Encoding:
    """A format with quant methods and an encoder, registered only by its tests."""

    FORMAT_NAME = "encoding"

    @flexq.hookimpl
    def flexq_quant_methods(self) -> list[str]:
        return ["scaled-int8", "compressed-tensors/scaled"]

    @flexq.hookimpl
    def flexq_encode(
        self,
        directory: Path,
        weights: dict[str, np.ndarray],
        others: dict[str, flexq.RawTensor],
    ) -> float:
        tensors = {k: flexq.RawTensor.of(v) for k, v in weights.items()}
        flexq.save_checkpoint(directory, {**tensors, **others})
        return 0.75


def test_hook_quant_methods_are_listed_per_format() -> None:
    name = flexq.register_format(Encoding())
    try:
        assert registry.quant_methods(name) == {"scaled-int8", "compressed-tensors/scaled"}
        row = next(r for r in flexq.list_formats() if r.name == name)
        assert row.methods == ("compressed-tensors/scaled", "scaled-int8")
    finally:
        flexq.unregister_format(name)


def test_hook_logical_metadata_claims_logical_tensors(
    scaled_ckpt: Path, scaled_format: ScaledFormat
) -> None:
    with flexq.Checkpoint(scaled_ckpt) as ckpt:
        claimed = registry.logical_metadata("scaled", ckpt)
    assert claimed == {"a": flexq.LogicalTensor((3, 4), "float32")}


def test_hook_recognized_keys_reach_the_composer(
    scaled_ckpt: Path, scaled_format: ScaledFormat
) -> None:
    with flexq.Checkpoint(scaled_ckpt) as ckpt:
        assert registry.recognized_keys("scaled", ckpt) == {"a.s"}


def test_hook_source_keys_are_checked_against_the_checkpoint(
    scaled_ckpt: Path, scaled_format: ScaledFormat
) -> None:
    with flexq.Checkpoint(scaled_ckpt) as ckpt:
        assert registry.source_keys("scaled", ckpt, "a") == ("a.q", "a.s")


def test_hook_read_plan_gives_slices_readable_as_pairs_and_objects(
    scaled_ckpt: Path, scaled_format: ScaledFormat
) -> None:
    with flexq.Checkpoint(scaled_ckpt) as ckpt:
        target = flexq.TargetSlice((3, 4), (1, 4), (2, 0), "float32")
        plan = registry.read_plan("scaled", ckpt, "a", target, False, ("a.q", "a.s"))
    assert plan is not None
    offset, shape = plan.source_slices["a.q"]
    assert (offset, shape) == ((2, 0), (1, 4))
    piece = plan.source_slices["a.q"]
    assert isinstance(piece, flexq.SourceSlice)
    assert piece.global_offset == (2, 0)
    assert piece.local_shape == (1, 4)


def test_hook_apply_dequantizes_the_planned_box(
    scaled_ckpt: Path, scaled_format: ScaledFormat
) -> None:
    ct = flexq.compose(scaled_ckpt)
    np.testing.assert_array_equal(
        ct.load("a", "float32"), np.arange(-6, 6, dtype=np.float32).reshape(3, 4) * 0.5
    )


def test_hook_encode_writes_a_checkpoint(tmp_path: Path) -> None:
    name = flexq.register_format(Encoding())
    try:
        assert name in registry.encoders()
        w = {"w": np.ones((2, 2), np.float32)}
        assert registry.encode(name, tmp_path, w, {}) == 0.75
        np.testing.assert_array_equal(flexq.compose(tmp_path).load("w", "float32"), w["w"])
    finally:
        flexq.unregister_format(name)


def test_pluggy_tracing_prints_every_hook_call_of_an_inspect_run(
    scaled_ckpt: Path, scaled_format: ScaledFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    lines: list[str] = []
    pm = registry.manager
    pm.trace.root.setwriter(lines.append)
    undo = pm.enable_tracing()
    try:
        assert main(["inspect", str(scaled_ckpt), "--formats", "scaled"]) == 0
    finally:
        undo()
        pm.trace.root.setwriter(None)
    calls = [line.split()[0] for line in lines if "[hook]" in line]
    # Each format is asked once per checkpoint-wide hook, the owner once per logical tensor.
    assert calls.count("flexq_quant_methods") == 1
    assert calls.count("flexq_logical_metadata") == 2  # 'scaled' and the passthrough owner
    assert calls.count("flexq_recognized_keys") == 1
    assert calls.count("flexq_source_keys") == 1  # 'a'; a plain tensor is its own source
    assert set(calls) <= {*HOOKS, "finish"}
    capsys.readouterr()


class Container:
    """A container format registered only by its tests: a ``*.toy`` file names the
    safetensors checkpoint written beside it, which it opens with its own config."""

    FORMAT_NAME = "container"

    def __init__(self, answer: object = None) -> None:
        self.answer = answer

    @flexq.hookimpl
    def flexq_open_checkpoint(self, path: str) -> flexq.Checkpoint | None:
        if not path.endswith(".toy"):
            return None
        if self.answer is not None:
            return self.answer  # type: ignore[return-value]
        ckpt = flexq.Checkpoint(path.removesuffix(".toy"))
        ckpt.config = {"architectures": ["FromContainer"]}
        return ckpt


def test_hook_open_checkpoint_opens_a_container_before_safetensors(scaled_ckpt: Path) -> None:
    name = flexq.register_format(Container())
    try:
        toy = f"{scaled_ckpt}.toy"
        with registry.open_checkpoint(toy) as ckpt:
            assert ckpt.config == {"architectures": ["FromContainer"]}
            assert sorted(ckpt.tensors) == ["a.q", "a.s", "norm"]
        # Not its container: the safetensors checkpoint as ever.
        with registry.open_checkpoint(scaled_ckpt) as ckpt:
            assert ckpt.config == {"architectures": ["Toy"]}
        assert flexq.compose(toy).load("norm", "float32").tolist() == [1.0, -2.0]
    finally:
        flexq.unregister_format(name)


def test_open_checkpoint_returning_no_checkpoint_disables_the_format(scaled_ckpt: Path) -> None:
    import pytest

    name = flexq.register_format(Container(answer="not a checkpoint"))
    try:
        with pytest.raises(flexq.PluginError, match="flexq_open_checkpoint returned"):
            registry.open_checkpoint(f"{scaled_ckpt}.toy")
        assert registry.disabled(name)
    finally:
        flexq.unregister_format(name)
