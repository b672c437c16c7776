"""Load time and peak memory as the checkpoint grows (x1, x2, x4), one fresh process per load.

Each load runs in its own process (``python -m bench.scale CKPT ENGINE LIMIT N``)
so its peak is its own. The child allocates and touches its float32 targets
first, then resets the kernel's peak-RSS mark (``/proc/self/clear_refs``),
loads, and reports:

- ``peak_extra_rss``: VmHWM minus the RSS before the load (anonymous memory
  plus checkpoint pages mapped into the process);
- ``peak_extra_anon``: the highest RssAnon above the pre-load value, sampled
  every 2 ms by a thread (memory the load allocated itself).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process in bytes."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[name] = int(rest.split()[0]) * 1024
    return out


class AnonSampler(threading.Thread):
    """Samples RssAnon until stopped; ``peak`` is the highest value seen."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = _status()["RssAnon"]
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.002):
            self.peak = max(self.peak, _status()["RssAnon"])


#: Engine names with this suffix load with ``atomic=False`` (no undo copies).
NON_ATOMIC = "-nonatomic"


def child(ckpt: str, engine: str, limit: int, n: int) -> dict[str, Any]:
    """One load in this process (the targets are float32, touched before the load)."""
    import paddle

    import flexq
    from bench.checkpoints import SIDE, fp8_keys

    state = {k: paddle.zeros([SIDE, SIDE], dtype="float32") for k in fp8_keys(n)}
    flexq.compose(ckpt).checkpoint.close()  # import the plugins outside the measurement
    Path("/proc/self/clear_refs").write_text("5")
    before = _status()
    sampler = AnonSampler()
    sampler.start()
    start = time.perf_counter()
    report = flexq.load_state_dict(
        state,
        ckpt,
        engine=engine.removesuffix(NON_ATOMIC),  # type: ignore[arg-type]
        max_inflight_bytes=limit,
        atomic=not engine.endswith(NON_ATOMIC),
    )
    seconds = time.perf_counter() - start
    sampler.done.set()
    sampler.join()
    after = _status()
    return {
        "seconds": seconds,
        "targets_bytes": n * SIDE * SIDE * 4,
        "peak_extra_rss": after["VmHWM"] - before["VmRSS"],
        "peak_extra_anon": max(sampler.peak, after["RssAnon"]) - before["RssAnon"],
        "batches": report.batches,
        "bytes_read": report.bytes_read,
    }


def run_child(ckpt: Path, engine: str, limit: int, n: int) -> dict[str, Any]:
    """Run :func:`child` in a fresh interpreter and return its figures."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.scale", str(ckpt), engine, str(limit), str(n)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scale child failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def measure(
    ckpts: dict[int, tuple[Path, int]], engines: list[str], limit: int, rounds: int
) -> dict[str, Any]:
    """For each size factor and engine: median seconds and peaks over ``rounds`` processes.

    :param ckpts: size factor -> (checkpoint dir, number of linears).
    """
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(rounds):  # alternate sizes and engines within every round
        for factor, (path, n) in ckpts.items():
            for engine in engines:
                runs.setdefault(f"{engine}/x{factor}", []).append(run_child(path, engine, limit, n))
    out: dict[str, Any] = {"max_inflight_bytes": limit, "rounds": rounds, "cases": {}}
    for name, results in runs.items():
        engine, size = name.split("/x")
        out["cases"][name] = {
            "engine": engine,
            "factor": int(size),
            "targets_bytes": results[0]["targets_bytes"],
            "batches": results[0]["batches"],
            "median_s": _med([r["seconds"] for r in results]),
            "median_peak_extra_rss": _med([r["peak_extra_rss"] for r in results]),
            "median_peak_extra_anon": _med([r["peak_extra_anon"] for r in results]),
            "runs": results,
        }
    return out


def _med(values: list[float]) -> float:
    from statistics import median

    return float(median(values))


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    print(json.dumps(child(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
