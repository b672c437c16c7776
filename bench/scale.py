"""The scale series: one ~1 GiB DeepSeek-shaped FP8 checkpoint loaded at 1, 2, 4 ranks and on
2 nodes x 2 ranks, flexq's default engine vs FlexCheckpoint's, page cache dropped before each load.

For ``bench/run.py`` (``nox -s bench``, or only this series: ``nox -s bench -- scale``).
Every launch is a real ``paddle.distributed.launch`` (two of them, ``--nnodes 2``
with a loopback master, for the 2-node case); each simulated node reads its own
copy of the files, so its disk bytes are its own. Per rank: load seconds, bytes
its loader returned, peak RSS above its targets, pieces planned and planning
seconds (:mod:`bench.scale_worker`); per node: bytes read from disk (its ranks'
``/proc/<pid>/io`` read_bytes summed) against the page floor of its ranks' slices
(the 4 KiB pages their planned boxes lie on, counted once per node).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.checkpoints import MoeShape, write_fp8_moe

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("scale_worker.py")
#: (label, nodes, ranks per node).
CONFIGS = [("1 rank", 1, 1), ("2 ranks", 1, 2), ("4 ranks", 1, 4), ("2 nodes x 2 ranks", 2, 2)]
ENGINES = ("direct", "flexcheckpoint")
PAGE = 4096


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(
    copies: list[Path], nodes: int, nproc: int, engine: str, drop: bool, shape: MoeShape
) -> tuple[list[dict[str, Any]], list[int]]:
    """One load on ``nodes`` x ``nproc`` ranks, node n reading ``copies[n]``: every rank's figures
    (with ``node`` and its page set), and per node the bytes of its copy now in the page cache."""
    import json

    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory(prefix="flexq-bench-scale-") as tmp:
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nproc)]
        if nodes > 1:
            cmd += ["--nnodes", str(nodes), "--master", f"127.0.0.1:{_free_port()}"]
        procs = []
        for n in range(nodes):
            node = cmd + (["--rank", str(n)] if nodes > 1 else [])
            node += ["--log_dir", f"{tmp}/log{n}", str(WORKER), str(copies[n]), tmp, engine]
            node += ["1" if drop else "0", ",".join(str(v) for v in vars(shape).values())]
            procs.append(
                subprocess.Popen(
                    node, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            )
        codes = [p.wait(timeout=1800) for p in procs]
        if any(codes):
            logs = "".join(p.read_text() for p in Path(tmp).glob("log*/*") if p.is_file())
            raise RuntimeError(f"{nodes}x{nproc} {engine} load failed:\n{logs[-4000:]}")
        ranks = []
        for r in range(nodes * nproc):
            figures = json.loads(Path(tmp, f"rank{r}.json").read_text())
            figures["node"] = r // nproc
            figures["pages"] = np.load(Path(tmp, f"pages{r}.npy"))
            ranks.append(figures)
        resident = [r["resident_after_load"] for r in ranks if "resident_after_load" in r]
        return ranks, resident


def summarize(ranks: list[dict[str, Any]], file_bytes: int, resident: list[int]) -> dict[str, Any]:
    """The figures of one load: per rank, per node, and the job's time (its slowest rank).

    :param resident: per node, bytes of its copy in the page cache after the load.
    """
    nodes = sorted({r["node"] for r in ranks})
    per_node = []
    for n in nodes:
        mine = [r for r in ranks if r["node"] == n]
        floor = len(np.unique(np.concatenate([r["pages"] for r in mine]), axis=0)) * PAGE
        read = sum(r["disk_read_bytes"] for r in mine)
        per_node.append(
            {
                # What the ranks' processes read from disk (/proc/<pid>/io): their checkpoint
                # pages, plus the pages of Paddle's own libraries the dropped cache made them
                # fault in again (an upper bound of the checkpoint's disk bytes).
                "read_bytes_of_ranks": read,
                "disk_over_floor": read / floor,
                # The node's copy in the page cache after the load (fincore): the checkpoint's
                # own disk bytes, unless another process drops the cache during the load.
                "checkpoint_disk_bytes": resident[n],
                "resident_over_floor": resident[n] / floor,
                "page_floor_bytes": floor,
                "disk_share_of_checkpoint": read / file_bytes,
            }
        )
    keep = (
        "seconds",
        "bytes_read",
        "planned_bytes",
        "disk_read_bytes",
        "peak_rss_above_targets",
        "target_bytes",
        "pieces",
        "plan_seconds",
        "files_loaded_by_paddle",
    )
    return {
        "seconds": max(r["seconds"] for r in ranks),
        "exact": all(all(r["exact"].values()) for r in ranks),
        "page_cache_dropped": any(r["page_cache_dropped"] for r in ranks),
        "ranks": [{k: r[k] for k in keep} for r in ranks],
        "share_of_checkpoint_per_rank": [r["bytes_read"] / file_bytes for r in ranks],
        "nodes": per_node,
    }


def measure(tmp: Path, log: Any, repeats: int = 1, shape: MoeShape | None = None) -> dict[str, Any]:
    """Write the checkpoint (and a second node's copy), run every config x engine
    ``repeats`` times; the figures of the fastest run of each."""
    shape = shape or MoeShape()
    log(f"scale: writing the MoE checkpoint ({shape})")
    first = write_fp8_moe(tmp / "scale-node0", shape)
    second = tmp / "scale-node1"
    shutil.copytree(first, second)
    file_bytes = sum(p.stat().st_size for p in first.glob("*.safetensors"))
    drop = os.geteuid() == 0
    out: dict[str, Any] = {
        "shape": vars(shape),
        "checkpoint_file_bytes": file_bytes,
        "files": len(list(first.glob("*.safetensors"))),
        "targets": "bfloat16",
        "page_cache_dropped_before_each_load": drop,
        "repeats": repeats,
        "configs": {},
    }
    for label, nodes, nproc in CONFIGS:
        out["configs"][label] = {"nodes": nodes, "ranks_per_node": nproc, "engines": {}}
        for engine in ENGINES:
            runs = []
            for _ in range(repeats):
                log(f"scale: {label}, {engine}")
                ranks, resident = launch([first, second], nodes, nproc, engine, drop, shape)
                runs.append(summarize(ranks, file_bytes, resident))
            best = min(runs, key=lambda r: r["seconds"])
            best["all_seconds"] = [r["seconds"] for r in runs]
            out["configs"][label]["engines"][engine] = best
    return out
