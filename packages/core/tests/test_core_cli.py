"""The flexq command: list-formats, inspect, and its one-line errors."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import flexq
from flexq.cli import main


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
    prefix = f"flexq: error: {tmp_path / 'model.safetensors'}: 4 bytes is too short"
    assert proc.stderr.startswith(prefix)
    assert "Traceback" not in proc.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    proc = run("--debug", "inspect", str(tmp_path / "missing"))
    assert proc.returncode == 2  # still an input error
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


def run_with(
    env: dict[str, str], *args: str, pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **env}
    if pythonpath is not None:
        environ["PYTHONPATH"] = os.pathsep.join(
            [str(pythonpath), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
    return subprocess.run(
        [sys.executable, "-m", "flexq.cli", *args],
        capture_output=True,
        text=True,
        env=environ,
        check=False,
    )


@pytest.fixture
def broken_site(tmp_path: Path) -> Path:
    """A site directory holding an installed format whose module fails to import."""
    site = tmp_path / "site"
    info = site / "flexq_format_broken-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flexq-format-broken\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text("[flexq]\nbroken = flexq_broken_fmt\n")
    (site / "flexq_broken_fmt.py").write_text("raise ImportError('needs libfoo')\n")
    return site


def plain(tmp_path: Path) -> Path:
    values = np.ones((2, 3), np.float32)
    return flexq.save_checkpoint(tmp_path / "plain", {"w": flexq.RawTensor.of(values)})


@pytest.mark.parametrize("command", ["list-formats", "inspect", "convert"])
def test_a_format_that_fails_to_import_is_a_warning_line(
    tmp_path: Path, broken_site: Path, command: str
) -> None:
    args = {
        "list-formats": ["list-formats"],
        "inspect": ["inspect", str(plain(tmp_path))],
        "convert": ["convert", str(plain(tmp_path)), str(tmp_path / "out")],
    }[command]
    proc = run_with({}, *args, pythonpath=broken_site)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("flexq: warning:")]
    assert len(warnings) == 1, proc.stderr
    assert "format 'broken' from flexq-format-broken" in warnings[0]
    assert "needs libfoo" in warnings[0]


def test_demo_without_paddle_says_to_install_it(tmp_path: Path) -> None:
    fake = tmp_path / "nopaddle"
    (fake / "paddle").mkdir(parents=True)
    (fake / "paddle" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'paddle'\", name='paddle')\n"
    )
    proc = run_with({}, "demo", pythonpath=fake)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("flexq: error: flexq demo needs PaddlePaddle")
    assert "pip install paddlepaddle" in proc.stderr


def test_paddle_logs_are_quiet_during_flexqs_calls_unless_debug(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from flexq.load.quiet import PADDLE_LOGGERS, quiet_paddle

    logger = logging.getLogger(PADDLE_LOGGERS[0])
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        with quiet_paddle():
            logger.info("loading file 1")
            logger.warning("Unexpected keys:{'a.weight_scale'}")
            logger.error("a real failure")
        with quiet_paddle(enabled=False):
            logger.warning("Unexpected keys (debug)")
        logger.info("outside flexq's calls")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    assert seen == ["a real failure", "Unexpected keys (debug)", "outside flexq's calls"]


def test_allow_unclaimed_passes_quantized_looking_tensors_with_a_warning(tmp_path: Path) -> None:
    path = flexq.save_checkpoint(
        tmp_path / "gptq",
        {
            "l.qweight": flexq.RawTensor.of(np.zeros((2, 4), np.int32)),
            "l.scales": flexq.RawTensor.of(np.ones((1, 4), np.float16)),
        },
        config={"quantization_config": {"quant_method": "gptq", "bits": 4}},
    )
    refused = run("inspect", str(path), "--formats", "")
    assert refused.returncode == 2
    assert "'gptq'" in refused.stdout
    proc = run("inspect", str(path), "--formats", "", "--allow-unclaimed", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["unclaimed"] == ["l.qweight"]
    lines = proc.stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("flexq: warning: --allow-unclaimed:")
    assert "gptq" in lines[0]
    assert "1 tensor(s) that look quantized pass through as stored" in lines[1]
    converted = run(
        "convert", str(path), str(tmp_path / "out"), "--formats", "", "--allow-unclaimed"
    )
    assert converted.returncode == 0, converted.stderr
    assert converted.stderr.count("flexq: warning: --allow-unclaimed:") == 2
