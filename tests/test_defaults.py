"""The defaults a user gets (DESIGN invariant 10): fast, bounded, and checked before the first
write; and the engine ``auto`` picks for each situation."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

import flexq
from flexq.compose import composition_of
from flexq.load import engine as engine_mod
from flexq.load import write
from flexq_fp8 import save_fp8_checkpoint

from .conftest import LINEARS, weights


def fp8_checkpoint(tmp_path: Path, bad_key: str | None = None) -> Path:
    """Block-FP8 weights of the tiny model; ``bad_key``'s last scale block NaN."""
    path = save_fp8_checkpoint(tmp_path / "fp8", weights(), layout="block", block_size=(32, 32))
    if bad_key is not None:
        ckpt = flexq.Checkpoint(path)
        info = ckpt.info(bad_key + "_scale_inv")
        with open(path / info.file, "r+b") as fh:
            fh.seek(info.start + info.nbytes - 4)
            fh.write(np.array(np.nan, np.float32).tobytes())
    return path


def plain_targets() -> dict[str, Any]:
    return {k: paddle.full(list(s), 7.0) for k, s in LINEARS.items()}


def test_a_bad_scale_in_the_last_tensor_fails_a_default_load_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = sorted(LINEARS)[-1]
    path = fp8_checkpoint(tmp_path, bad_key=last)
    monkeypatch.setenv("FLEXQ_NONFINITE_SCALES", "error")
    sd = plain_targets()
    # One row per piece: the bad block is in the very last piece decoded.
    with pytest.raises(flexq.FormatError, match=f"{last}_scale_inv"):
        flexq.load_state_dict(sd, path, max_inflight_bytes=1)
    for key, t in sd.items():
        assert (t.numpy() == 7.0).all(), key


def test_a_plugin_that_cannot_decode_fails_a_default_load_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fp8_checkpoint(tmp_path)
    impl = next(
        i
        for i in flexq.plugin.manager.registry.manager.hook.flexq_apply.get_hookimpls()
        if i.plugin_name == "fp8"
    )

    def broken(*args: Any) -> Any:
        raise RuntimeError("no kernel")

    sd = plain_targets()
    monkeypatch.setattr(impl, "function", broken)
    with pytest.raises(flexq.PluginError, match="no kernel"):
        flexq.load_state_dict(sd, path)
    for key, t in sd.items():
        assert (t.numpy() == 7.0).all(), key


def test_a_default_load_writes_each_piece_as_it_is_decoded_and_keeps_no_undo_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fp8_checkpoint(tmp_path)
    copies: list[object] = []
    real = write.host_copy

    def counted(t: Any) -> Any:
        copies.append(t)
        return real(t)

    monkeypatch.setattr(write, "host_copy", counted)
    sd = plain_targets()
    report = flexq.load_state_dict(sd, path, max_inflight_bytes=1)
    assert report.batches > 1
    assert copies == []
    ct = flexq.compose(path)
    for key, t in sd.items():
        np.testing.assert_array_equal(t.numpy(), ct.load(key, "float32"))


class FakePaddle:
    """The parts of paddle ``_auto`` asks about, set per situation."""

    def __init__(self, ranks: int, cuda: bool) -> None:
        self._ranks, self._cuda = ranks, cuda
        self.distributed = self
        self.device = self

    def get_world_size(self) -> int:
        return self._ranks

    def is_compiled_with_cuda(self) -> bool:
        return self._cuda

    def get_all_custom_device_type(self) -> list[str]:
        return []


def sharded_targets(replicated: bool) -> dict[str, Any]:
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

    out = {}
    for key, (rows, cols) in LINEARS.items():
        local = rows if replicated else rows // 2
        out[key] = ShardedWeight(
            key, paddle.zeros([local, cols]), (local, cols), (rows, cols), (0, 0)
        )
    return out


@pytest.mark.parametrize(
    ("ranks", "cuda", "replicated", "native", "chosen"),
    [
        (1, False, False, False, "direct"),
        (1, True, True, False, "direct"),
        (2, False, True, False, "direct"),
        (2, True, False, False, "direct"),
        (2, True, True, False, "flexcheckpoint"),
        (1, False, False, True, "native"),
    ],
)
def test_auto_picks_the_engine_for_the_situation_and_says_why(
    tmp_path: Path, ranks: int, cuda: bool, replicated: bool, native: bool, chosen: str
) -> None:
    ct = composition_of(fp8_checkpoint(tmp_path))
    name, why = engine_mod._auto(ct, native, FakePaddle(ranks, cuda), sharded_targets(replicated))
    assert name == chosen
    assert why


def test_auto_announces_its_choice_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = fp8_checkpoint(tmp_path)
    engine_mod._announced.clear()
    with caplog.at_level(logging.DEBUG, logger="flexq"):
        flexq.load_state_dict(plain_targets(), path)
        flexq.load_state_dict(plain_targets(), path)
    lines = [r.getMessage() for r in caplog.records if "engine" in r.getMessage()]
    assert lines == ["flexq: engine 'direct' (one process: direct reads are the fastest)"]
