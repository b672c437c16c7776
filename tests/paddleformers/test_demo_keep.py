"""Issue 29, item 6: ``flexq demo --keep DIR`` keeps the PaddleFormers demo's checkpoints
(no silent switch to the plain-Paddle demo), each loadable by every API, and says what
it kept and where. In ``nox -s paddleformers``; ~60 s (one demo run, one load)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("paddleformers")

import flexq
import flexq.paddleformers


def test_demo_keep_keeps_paddleformers_checkpoints_every_api_loads(tmp_path: Path) -> None:
    from paddleformers.transformers import AutoModelForCausalLM

    keep = tmp_path / "tiny"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLEXQ_")}
    proc = subprocess.run(
        [sys.executable, "-m", "flexq.cli", "demo", "--keep", str(keep)],
        capture_output=True,
        text=True,
        env={**environ, "COLUMNS": "80"},
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr
    assert "a PaddleFormers LlamaForCausalLM in every installed format" in proc.stdout
    formats = sorted(p.name for p in keep.iterdir() if p.name != "bf16")
    assert "fp8" in formats
    assert f"kept {len(formats)} quantized checkpoints of a PaddleFormers LlamaForCausalLM" in (
        proc.stdout
    )
    for name in formats:
        assert f"  {keep / name}/" in proc.stdout
    config = json.loads((keep / "fp8" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert "quantization_config" in config
    # what the summary says loads it does
    model = flexq.paddleformers.from_pretrained(AutoModelForCausalLM, keep / "fp8", dtype="float32")
    assert type(model).__name__ == "LlamaForCausalLM"
    got = model.state_dict()["model.norm.weight"].numpy()
    want = flexq.compose(keep / "fp8").load("model.norm.weight", "float32")
    np.testing.assert_array_equal(got, want)
