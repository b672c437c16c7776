"""Bytes read per rank, 2 ranks (``paddle.distributed.launch --nproc_per_node 2``), both engines.

Every linear is a Shard(0) target: each rank needs half of every weight's rows
and the scale rows covering them. See :mod:`bench.rank_worker` for how bytes
are counted for each engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("rank_worker.py")


def launch(ckpt: Path, engine: str, n: int) -> list[dict[str, Any]]:
    """Run the worker on 2 ranks; return each rank's figures."""
    with tempfile.TemporaryDirectory(prefix="flexq-bench-ranks-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2"]
        cmd += ["--log_dir", f"{tmp}/log", str(WORKER), str(ckpt), tmp, engine, str(n)]
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        if proc.returncode != 0:
            logs = "".join(p.read_text() for p in Path(tmp, "log").glob("*") if p.is_file())
            raise RuntimeError(f"2-rank {engine} load failed:\n{logs[-4000:]}")
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(2)]


def measure(ckpt: Path, n: int, engines: list[str]) -> dict[str, Any]:
    """Per-rank bytes read and seconds for each engine, plus the checkpoint's data bytes."""
    data = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
    out: dict[str, Any] = {"checkpoint_file_bytes": data, "tensors": n, "engines": {}}
    for engine in engines:
        ranks = launch(ckpt, engine, n)
        key = "bytes_read_flexq" if engine == "direct" else "bytes_read_paddle_load"
        out["engines"][engine] = {
            "bytes_read_per_rank": [r[key] for r in ranks],
            "share_of_checkpoint": [r[key] / data for r in ranks],
            "seconds_per_rank": [r["seconds"] for r in ranks],
            "ranks": ranks,
        }
    return out
