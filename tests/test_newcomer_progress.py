"""Issue 29, item 7: convert's progress moves in bytes while shards are written, and
prints plain lines when stderr is not a terminal. Costs ~2 s (three tiny converts)."""

from __future__ import annotations

import importlib
import io
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flexq.cli.convert import convert
from flexq.cli.progress import ConvertBar, PlainProgress, convert_progress
from flexq_fp8 import save_fp8_checkpoint

convert_module = importlib.import_module("flexq.cli.convert")
OUT_BYTES = 4 * 64 * 64 * 2  # four 64x64 weights, bfloat16


@pytest.fixture
def four_weights(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.standard_normal((64, 64)).astype(np.float32) for i in range(4)}
    return save_fp8_checkpoint(tmp_path / "c", weights)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def start(self, total_bytes: int, tensors: int) -> None:
        self.events.append(("start", total_bytes))

    def advance(self, key: str, nbytes: int) -> None:
        self.events.append(("decoded", nbytes))

    def wrote(self, nbytes: int) -> None:
        self.events.append(("wrote", nbytes))

    def done(self) -> None:
        self.events.append(("done", 0))


def test_written_bytes_are_reported_shard_by_shard_and_add_up(
    four_weights: Path, tmp_path: Path
) -> None:
    seen = Recorder()
    convert(four_weights, tmp_path / "out", dtype="bfloat16", max_shard_bytes=2 * 64 * 64 * 2,
            progress=seen)  # fmt: skip
    kinds = [k for k, n in seen.events if k != "wrote" or n]  # empty writes left out
    assert kinds[0] == "start"
    assert kinds[-1] == "done"
    # shard 1's two tensors decoded, then written; only then shard 2's
    assert kinds[1:3] == ["decoded", "decoded"]
    first_write = kinds.index("wrote")
    assert first_write == 3
    assert kinds[first_write:].index("decoded") > 0
    assert sum(n for k, n in seen.events if k == "wrote") == OUT_BYTES
    assert sum(n for k, n in seen.events if k == "decoded") == OUT_BYTES


def test_progress_moves_while_a_shard_file_is_still_being_written(
    four_weights: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in for safetensors' one long write: it writes half the file, then waits
    until the watcher has reported bytes before it writes the rest."""
    seen = Recorder()
    reported = threading.Event()
    during: list[int] = []
    real_save = convert_module.save_file

    def slow_save(tensors: Any, path: Path, metadata: Any) -> None:
        real_save(tensors, path, metadata)
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[: len(data) // 2])
        assert reported.wait(timeout=30), "the watcher reported nothing during the write"
        during.extend(n for k, n in seen.events if k == "wrote")
        Path(path).write_bytes(data)

    class Signalling(Recorder):
        def wrote(self, nbytes: int) -> None:
            super().wrote(nbytes)
            if nbytes:
                reported.set()

    seen = Signalling()
    monkeypatch.setattr(convert_module, "save_file", slow_save)
    monkeypatch.setattr(convert_module, "_WATCH_SECONDS", 0.01)
    convert(four_weights, tmp_path / "out", dtype="bfloat16", progress=seen)
    assert 0 < sum(during) < OUT_BYTES  # part of the shard, reported before it was whole
    assert sum(n for k, n in seen.events if k == "wrote") == OUT_BYTES


def test_not_on_a_terminal_progress_is_plain_lines_every_ten_percent(
    four_weights: Path, tmp_path: Path
) -> None:
    stream = io.StringIO()
    shown = PlainProgress(stream, quiet_seconds=0)
    convert(
        four_weights,
        tmp_path / "out",
        dtype="bfloat16",
        progress=ConvertBar(shown, on_done=lambda: None),
    )
    lines = stream.getvalue().splitlines()
    found = [re.match(r"flexq: convert: (\d+)% \(decoded ", line) for line in lines]
    percents = [int(m[1]) for m in found if m is not None]
    assert len(percents) == len(lines)
    assert percents == sorted(set(percents))
    assert percents[-1] == 100
    assert all(p % 10 == 0 for p in percents)
    assert lines[-1] == "flexq: convert: 100% (decoded 32.8 kB, written 32.8 kB of 32.8 kB)"


def test_a_small_convert_prints_no_plain_progress() -> None:
    stream = io.StringIO()  # not a TTY
    bar = convert_progress(on_done=lambda: None, stream=stream)
    bar.start(OUT_BYTES, 4)
    bar.advance("w0", OUT_BYTES)
    bar.wrote(OUT_BYTES)
    bar.stop()
    assert stream.getvalue() == ""  # done within QUIET_SECONDS: nothing to say


# -- progress for API loads: off by default in load_state_dict, on when asked ---------------


def _targets() -> dict[str, Any]:
    import paddle

    return {f"w{i}": paddle.zeros([64, 64], dtype="float32") for i in range(4)}


def test_load_state_dict_shows_no_progress_by_default(
    four_weights: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import flexq

    flexq.load_state_dict(_targets(), four_weights)
    assert capsys.readouterr().err == ""


def test_load_state_dict_progress_true_shows_the_bytes_read_on_stderr(
    four_weights: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import flexq

    report = flexq.load_state_dict(_targets(), four_weights, progress=True)
    err = capsys.readouterr().err
    assert "loading c" in err  # the checkpoint directory's name
    done = f"{report.bytes_read / 1000:.1f}/{report.bytes_read / 1000:.1f} kB"
    assert done in err, err


def test_paddleformers_from_pretrained_has_progress_on_and_load_has_it_off() -> None:
    import inspect

    import flexq.paddleformers as pf

    assert inspect.signature(pf.from_pretrained).parameters["progress"].default is True
    assert inspect.signature(pf.load).parameters["progress"].default is False
