"""What keeps a default load's memory near one piece: no file is mapped, each piece's
sources are read into buffers of its own that go once it is written, and the decode
check before the first write covers only the first rows of a format's smallest piece."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

import flexq
from flexq.compose import composition_of
from flexq.load import pieces as piece_planner
from flexq.load.sources import DirectSource
from flexq_fp8 import save_fp8_checkpoint

from .conftest import LINEARS, assert_loaded_as_composed, weights


def fp8_checkpoint(tmp_path: Path) -> Path:
    return save_fp8_checkpoint(tmp_path / "fp8", weights(), layout="block", block_size=(32, 32))


def plain_targets() -> dict[str, Any]:
    return {k: paddle.full(list(s), 7.0) for k, s in LINEARS.items()}


def fp8_apply_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[int, ...]]]:
    """Record (logical key, target box shape) of every fp8 apply, in order."""
    impl = next(
        i
        for i in flexq.plugin.manager.registry.manager.hook.flexq_apply.get_hookimpls()
        if i.plugin_name == "fp8"
    )
    real = impl.function
    calls: list[tuple[str, tuple[int, ...]]] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        named = dict(zip(impl.argnames, args, strict=False)) | kwargs
        calls.append((named["logical_key"], tuple(named["plan"].target.local_shape)))
        return real(*args, **kwargs)

    monkeypatch.setattr(impl, "function", recorded)
    return calls


def test_a_default_load_maps_no_checkpoint_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fp8_checkpoint(tmp_path)
    files = sorted(str(f.resolve()) for f in path.glob("*.safetensors"))
    mapped: list[list[str]] = []
    real_boxes = DirectSource.boxes

    def watched(self: DirectSource, *args: Any, **kwargs: Any) -> Any:
        # What this process has mapped at every fetch of sources.
        maps = Path("/proc/self/maps").read_text()
        mapped.append([f for f in files if f in maps])
        return real_boxes(self, *args, **kwargs)

    monkeypatch.setattr(DirectSource, "boxes", watched)
    sd = plain_targets()
    report = flexq.load_state_dict(sd, path)
    # One batch (the default bound is 1 GiB), yet no file is mapped: reads are preads
    # into each piece's own buffers, freed with the piece once it is written.
    assert report.batches == 1
    assert len(mapped) >= report.pieces
    assert all(m == [] for m in mapped)
    assert_loaded_as_composed(sd, path)


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint"])
def test_the_check_before_the_first_write_decodes_only_the_first_rows_of_the_smallest_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    path = fp8_checkpoint(tmp_path)
    # 32 rows of 64 float32 columns: a probe of at most 8 KiB.
    monkeypatch.setattr(piece_planner, "PROBE_BYTES", 32 * 64 * 4)
    calls = fp8_apply_calls(monkeypatch)
    sd = plain_targets()
    # Either source hands out the probe's boxes, which lie inside the piece's own.
    assert flexq.load_state_dict(sd, path, engine=engine).engine == engine  # type: ignore[arg-type]
    smallest = min(LINEARS, key=lambda k: (np.prod(LINEARS[k]), sorted(LINEARS).index(k)))
    first_key, first_box = calls[0]
    assert np.prod(LINEARS[first_key]) == np.prod(LINEARS[smallest])
    assert first_box == (32, LINEARS[first_key][1])
    # then every piece once, whole (no piece is decoded twice)
    assert sorted(calls[1:]) == sorted((k, s) for k, s in LINEARS.items())
    assert_loaded_as_composed(sd, path)


def test_a_format_that_ignores_the_planned_box_fails_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fp8_checkpoint(tmp_path)
    monkeypatch.setattr(piece_planner, "PROBE_BYTES", 32 * 64 * 4)
    impl = next(
        i
        for i in flexq.plugin.manager.registry.manager.hook.flexq_apply.get_hookimpls()
        if i.plugin_name == "fp8"
    )

    def whole_tensor_always(*args: Any, **kwargs: Any) -> Any:
        # right for whole pieces, wrong for the probe's first rows
        named = dict(zip(impl.argnames, args, strict=False)) | kwargs
        return np.zeros(LINEARS[named["logical_key"]], np.float32)

    monkeypatch.setattr(impl, "function", whole_tensor_always)
    sd = plain_targets()
    with pytest.raises(flexq.FlexqError, match="shape"):
        flexq.load_state_dict(sd, path)
    for key, t in sd.items():
        assert (t.numpy() == 7.0).all(), key


def test_a_probe_plan_is_the_pieces_own_when_the_piece_is_small(tmp_path: Path) -> None:
    from flexq.load.pieces import plan_pieces
    from flexq.load.report import LoadOptions
    from flexq.load.targets import describe

    ct = composition_of(fp8_checkpoint(tmp_path))
    options = LoadOptions(None, 1 << 30, False, None, False, {})
    pieces = plan_pieces(ct, describe(plain_targets()), options)
    # The one fp8 probe, on the smallest piece, is that piece's own plan.
    (probe,) = [p for p in pieces if p.probe is not None]
    assert probe.probe is probe.plan
    assert probe.nbytes == min(p.nbytes for p in pieces)
