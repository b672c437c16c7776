"""The README's "your own checkpoint" screen, run as a new user would run it.

Its shell block (inspect, verify, convert) runs command by command, in order, in a
fresh directory, with ``PATH`` standing for a tiny FP8 checkpoint; each must exit 0
and print what the block's comment promises. The screen's Python block (PaddleFormers
and ``flexq.load_state_dict``) runs in ``nox -s paddleformers``:
tests/paddleformers/test_readme_walkthrough.py. Costs ~15 s (three CLI processes,
two of them import Paddle).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from flexq_fp8 import save_fp8_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SCREEN = (ROOT / "README.md").read_text().split("## Your own checkpoint", 1)[1].split("\n## ")[0]
#: What each command's comment in the README promises, as the output shows it.
PROMISED = {
    "inspect": ("fp8", "0 problems"),  # "which formats claim it, logical tensors, problems"
    "verify": ("no problems found",),  # "read and decode every tensor, check what it finds"
    "convert": ("wrote 2 tensors",),  # "dequantize into a plain safetensors checkpoint"
}


def shell_commands() -> list[list[str]]:
    """The screen's shell block, one argv per line, comments dropped."""
    block = SCREEN.split("```bash\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_the_readme_screen_runs_inspect_verify_convert_on_an_fp8_checkpoint(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)
    weights = {
        f"model.layers.0.mlp.{p}.weight": rng.standard_normal((64, 32)).astype(np.float32)
        for p in ("up_proj", "gate_proj")
    }
    checkpoint = save_fp8_checkpoint(tmp_path / "my-fp8", weights)
    work = tmp_path / "work"
    work.mkdir()
    commands = shell_commands()
    assert [argv[:2] for argv in commands] == [
        ["flexq", "inspect"],
        ["flexq", "verify"],
        ["flexq", "convert"],
    ]
    # the venv's own console script, as `. .nox/demo/bin/activate` puts it on PATH
    flexq = Path(sys.executable).parent / "flexq"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLEXQ_")}
    for argv in commands:
        args = [str(checkpoint) if a == "PATH" else a for a in argv[1:]]
        proc = subprocess.run(
            [str(flexq), *args], cwd=work, capture_output=True, text=True, env=environ, timeout=300
        )
        assert proc.returncode == 0, (argv, proc.stderr)
        for promise in PROMISED[argv[1]]:
            assert promise in proc.stdout, (argv, proc.stdout)
        assert proc.stderr == "", (argv, proc.stderr)  # quiet: no third-party noise
    import flexq as api

    plain = api.Checkpoint(work / "plain")
    assert sorted(plain) == sorted(weights)
    assert {plain.info(k).dtype for k in plain} == {"BF16"}
