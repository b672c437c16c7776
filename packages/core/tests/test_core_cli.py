"""The flexq command: list-formats, inspect, and its one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import numpy as np
import pytest

import flexq
from flexq.cli import main

if TYPE_CHECKING:
    from pathlib import Path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flexq.cli", *args], capture_output=True, text=True, check=False
    )


def test_list_formats_json_lists_every_installed_format() -> None:
    proc = run("list-formats", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    expected = {r.name: r.version for r in flexq.list_formats() if r.source == "entry point"}
    assert {r["name"]: r["version"] for r in rows} == expected
    assert all(set(r) >= {"name", "version", "distribution", "source", "description"} for r in rows)


def test_list_formats_table(capsys: object) -> None:
    proc = run("list-formats")
    assert proc.returncode == 0
    assert "distribution" in proc.stdout


def test_inspect_json_reports_tensors_components_and_bytes(
    scaled_ckpt: Path, scaled_format: object, capsys: object
) -> None:
    assert main(["inspect", str(scaled_ckpt), "--json", "--formats", "scaled"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    report = json.loads(out)
    by_key = {t["key"]: t for t in report["tensors"]}
    assert by_key["a"]["format"] == "scaled"
    assert [c["key"] for c in by_key["a"]["components"]] == ["a.q", "a.s"]
    assert by_key["a"]["components"][1]["file"] == "model-00002-of-00002.safetensors"
    assert by_key["norm"]["format"] == "passthrough"
    assert report["total_bytes"] == 12 + 4 + 4
    assert report["problems"] == []


def test_inspect_lists_problems_and_exits_2(tmp_path: Path, capsys: object) -> None:
    path = flexq.save_checkpoint(
        tmp_path / "c", {"w": flexq.RawTensor("F8_E4M3", np.zeros((2, 2), np.uint8))}
    )
    assert main(["inspect", str(path), "--formats", ""]) == 2
    captured = capsys.readouterr()  # type: ignore[attr-defined]
    assert "F8_E4M3" in captured.out
    assert captured.err.strip() == f"flexq: 1 problem(s) in {path}"


def test_bad_input_is_one_line_on_stderr_exit_2_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 4)
    proc = run("inspect", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("flexq: error: model.safetensors: 4 bytes is too short")
    assert "Traceback" not in proc.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    proc = run("--debug", "inspect", str(tmp_path / "missing"))
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    assert "CheckpointError" in proc.stderr


def test_tables_print_names_whole_and_brackets_literally(
    scaled_ckpt: Path, scaled_format: object, capsys: pytest.CaptureFixture[str]
) -> None:
    long = "model.layers.0.self_attn.q_proj_with_a_very_long_name"
    path = flexq.save_checkpoint(
        scaled_ckpt.parent / "long",
        {
            f"{long}.q": flexq.RawTensor.of(np.ones((2, 2), np.int8)),
            f"{long}.s": flexq.RawTensor.of(np.array(1.0, np.float32)),
        },
    )
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert long in out
    assert "[2, 2]" in out  # a shape, not rich markup
