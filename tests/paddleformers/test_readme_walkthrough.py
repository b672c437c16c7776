"""The README's "your own checkpoint" Python block, run as written in a fresh process,
on an FP8 Llama twin (in ``nox -s paddleformers``; the shell block above it runs in the
default suite, tests/test_readme_walkthrough.py). Costs ~20 s (one process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("paddleformers")

from .conftest import CONFIGS, Checkpoints

ROOT = Path(__file__).resolve().parents[2]
SCREEN = (ROOT / "README.md").read_text().split("## Your own checkpoint", 1)[1].split("\n## ")[0]
#: The block's placeholders: a hub repo id and a directory of the user's own checkpoint.
PLACEHOLDERS = ('"Qwen/Qwen3-8B-FP8"', '"/models/Qwen3-8B-FP8"')


def test_the_readme_python_block_loads_an_fp8_checkpoint_as_written(
    checkpoints: Checkpoints, tmp_path: Path
) -> None:
    block = SCREEN.split("```python\n", 1)[1].split("```", 1)[0]
    path = checkpoints.twin("LlamaForCausalLM", "fp8")
    hidden = CONFIGS["LlamaForCausalLM"]["hidden_size"]
    for placeholder in PLACEHOLDERS:
        assert placeholder in block
        block = block.replace(placeholder, repr(str(path)))
    assert "paddle.zeros([4096])" in block
    block = block.replace("paddle.zeros([4096])", f"paddle.zeros([{hidden}])")
    check = (
        "\nimport json\n"
        "norm = model.state_dict()['model.norm.weight'].astype('float32').numpy()\n"
        "print(json.dumps({'model': type(model).__name__, 'owners': sorted({e.owner for e in ct.entries.values()}),\n"
        "    'same_norm': bool((norm == params['norm.weight'].numpy()).all())}))\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLEXQ_")}
    proc = subprocess.run(
        [sys.executable, "-c", block + check],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environ,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "model": "LlamaForCausalLM",
        "owners": ["fp8", "passthrough"],
        "same_norm": True,
    }


def test_the_demo_imports_paddleformers_without_third_party_warnings() -> None:
    script = "from flexq.cli import demo_paddleformers as d; print(d.available())"
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.stdout == "True\n"
    # was: transformers' "PyTorch was not found" and PaddleFormers' WARNING about PyTorch
    assert proc.stderr == ""
