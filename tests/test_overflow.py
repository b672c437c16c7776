"""float16 targets: values beyond 65504 are an error naming the tensor and the count, or,
with ``FLEXQ_OVERFLOW=saturate``, clamped to the largest float16 value.

The catalogue case ``float16-overflow`` (tests/reliability/catalogue.py) pins the
atomic load; these pin the default load, the opt-in and the CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

import flexq
from flexq.formatkit.rounding import OVERFLOW_ENV

from .reliability import surgery

A, B = surgery.FP8_KEYS


def overflowing(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """The catalogue's FP8 checkpoint with one block scale of ``b`` 1000 (values up to
    448000), and its logical tensors decoded to float32."""
    ckpt = surgery.fp8(tmp_path / "ckpt")
    surgery.set_values(ckpt, B + "_scale_inv", (2, 1), 1000.0)
    ct = flexq.compose(ckpt)
    return ckpt, {k: ct.load(k, "float32") for k in (A, B)}


def float16_targets() -> dict[str, paddle.Tensor]:
    return {A: paddle.full([64, 64], 7.0, "float16"), B: paddle.full([96, 64], 7.0, "float16")}


def test_a_default_load_names_the_count_and_leaves_the_overflowing_tensor_unwritten(
    tmp_path: Path,
) -> None:
    ckpt, decoded = overflowing(tmp_path)
    count = int((np.abs(decoded[B]) >= 65520).sum())
    assert 0 < count < decoded[B].size
    targets = float16_targets()
    with pytest.raises(flexq.TargetError) as raised:
        flexq.load_state_dict(targets, ckpt, engine="direct")
    message = str(raised.value)
    for words in (f"'{B}'", "format fp8", f"holds {count} value(s) beyond float16", OVERFLOW_ENV):
        assert words in message, message
    # The piece that holds them (all of b) is not written; a, decoded before it, is.
    assert (targets[B].numpy() == 7.0).all()
    np.testing.assert_array_equal(targets[A].numpy(), decoded[A].astype(np.float16))


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint"])
def test_saturate_clamps_overflowing_values_to_the_largest_float16(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    ckpt, decoded = overflowing(tmp_path)
    monkeypatch.setenv(OVERFLOW_ENV, "saturate")
    targets = float16_targets()
    flexq.load_state_dict(targets, ckpt, engine=engine)  # type: ignore[arg-type]
    want = np.clip(decoded[B], -65504, 65504).astype(np.float16)
    np.testing.assert_array_equal(targets[B].numpy().view(np.uint16), want.view(np.uint16))
    assert np.abs(targets[B].numpy()).max() == 65504


def convert(src: Path, dst: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEXQ_")}
    return subprocess.run(
        [sys.executable, "-m", "flexq.cli", "convert", str(src), str(dst), "--dtype", "float16"],
        capture_output=True,
        text=True,
        env={**clean, **env},
        check=False,
    )


def test_cli_convert_to_float16_refuses_overflow_in_one_line_and_saturates_when_asked(
    tmp_path: Path,
) -> None:
    ckpt, decoded = overflowing(tmp_path)
    out = tmp_path / "out"
    proc = convert(ckpt, out)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("flexq: error: ")
    assert f"'{B}'" in lines[0]
    assert OVERFLOW_ENV in lines[0]
    assert not out.exists() or not any(out.iterdir())
    proc = convert(ckpt, out, **{OVERFLOW_ENV: "saturate"})
    assert proc.returncode == 0, proc.stderr
    with flexq.Checkpoint(out) as written:
        got = written.read(B).view(np.float16)
    np.testing.assert_array_equal(got, np.clip(decoded[B], -65504, 65504).astype(np.float16))
