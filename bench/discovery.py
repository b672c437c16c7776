"""What discovery and the first compose cost a fresh process, every format installed.

For issue 30's discovery goal. Each child is a fresh interpreter that imports Paddle
and flexq first (the baseline every flexq user pays, with or without discovery), then
times, with ``time.perf_counter``:

- ``discovery_s``: ``flexq.list_formats()`` (entry points read, every format's plugin
  object imported and registered);
- ``first_compose_s``: the first ``flexq.compose(path)`` after it (detection, config
  parsing: the modules of the checkpoint's own format imported now);
- ``total_s``: the two together, the figure the goal bounds.

Cases: a block-FP8 checkpoint (its format's config models are pydantic models, so
pydantic is imported) and a plain bf16 checkpoint (no format asked, nothing imported).
``wall_*`` figures are whole-process wall times of the same child with and without the
discovery + compose step, so the baseline (interpreter start, ``import paddle, flexq``)
is subtracted within one run. ``python bench/run.py discovery`` (``nox -s bench --
discovery``) writes the results and the discovery section of docs/performance.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

from bench.fresh import ROOT, run_module
from bench.verify_cost import goals_table

HEADING = "## Discovery: a fresh process's entry points and first compose"
CASES = ("fp8", "plain")


def write_checkpoints(tmp: Path) -> dict[str, Path]:
    """A small block-FP8 checkpoint and a plain bf16 one."""
    import numpy as np

    from flexq import RawTensor, save_checkpoint
    from flexq_fp8 import save_fp8_checkpoint

    weights = {f"model.layers.{i}.mlp.weight": np.ones((256, 256), np.float32) for i in range(4)}
    bits = np.full((256, 256), 0x3F80, np.uint16)
    return {
        "fp8": save_fp8_checkpoint(tmp / "fp8", weights),
        "plain": save_checkpoint(tmp / "plain", {"embed.weight": RawTensor("BF16", bits)}),
    }


def child(path: str, compose: bool) -> dict[str, Any]:
    """In this fresh process: import Paddle and flexq, then (``compose``) discovery and
    the first compose, timed."""
    import paddle  # noqa: F401 - the caller's import, part of the baseline

    import flexq

    out: dict[str, Any] = {}
    if compose:
        start = time.perf_counter()
        rows = flexq.list_formats()
        found = time.perf_counter()
        flexq.compose(path).checkpoint.close()
        done = time.perf_counter()
        out = {
            "discovery_s": found - start,
            "first_compose_s": done - found,
            "total_s": done - start,
            "formats": len([r for r in rows if r.error is None]),
            "pydantic_imported": "pydantic" in sys.modules,
            "format_modules": sorted(
                m for m in sys.modules if m.startswith("flexq_") and m.count(".") == 1
            ),
        }
    return out


def _wall(path: Path, compose: bool) -> float:
    """Whole-process wall seconds of one child (interpreter start to exit)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "bench.discovery", str(path), str(int(compose))],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=300,
    )
    return time.perf_counter() - start


def measure(tmp: Path, rounds: int, log: Any = print) -> dict[str, Any]:
    """Medians over ``rounds`` alternating fresh processes per case."""
    paths = write_checkpoints(tmp)
    for path in paths.values():  # untimed: bytecode compiled, pages cached
        run_module("bench.discovery", [str(path), "1"])
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CASES}
    walls: dict[str, dict[str, list[float]]] = {c: {"with": [], "baseline": []} for c in CASES}
    for r in range(rounds):
        log(f"discovery: round {r + 1} of {rounds}")
        for case in CASES[r % 2 :] + CASES[: r % 2]:
            runs[case].append(run_module("bench.discovery", [str(paths[case]), "1"]))
            walls[case]["baseline"].append(_wall(paths[case], False))
            walls[case]["with"].append(_wall(paths[case], True))
    # the machine is shared: how busy it was
    out: dict[str, Any] = {"rounds": rounds, "load_average_at_end": os.getloadavg(), "cases": {}}
    for case in CASES:
        rs = runs[case]
        entry: dict[str, Any] = {
            key: median(r[key] for r in rs) for key in ("discovery_s", "first_compose_s", "total_s")
        }
        entry["total_range_s"] = [min(r["total_s"] for r in rs), max(r["total_s"] for r in rs)]
        entry["formats"] = rs[0]["formats"]
        entry["pydantic_imported"] = rs[0]["pydantic_imported"]
        entry["format_modules"] = rs[0]["format_modules"]
        w = walls[case]
        entry["wall_baseline_s"] = median(w["baseline"])
        entry["wall_with_s"] = median(w["with"])
        entry["wall_difference_s"] = median(
            a - b for a, b in zip(w["with"], w["baseline"], strict=True)
        )
        out["cases"][case] = entry
    return out


def goals(f: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The issue's discovery goal, per case."""
    out = {}
    for case, c in f["cases"].items():
        out[f"discovery_{case}"] = {
            "goal": f"discovery + first compose in a fresh process, {c['formats']} formats "
            f"installed, {case} checkpoint (after import paddle, flexq)",
            "target": "<= 15 ms",
            "measured": f"{c['total_s'] * 1000:.1f} ms (discovery {c['discovery_s'] * 1000:.1f}"
            f" ms, first compose {c['first_compose_s'] * 1000:.1f} ms; range "
            f"{c['total_range_s'][0] * 1000:.1f}-{c['total_range_s'][1] * 1000:.1f} ms; whole "
            f"process {c['wall_with_s'] * 1000:.0f} ms vs {c['wall_baseline_s'] * 1000:.0f} ms "
            f"baseline, difference {c['wall_difference_s'] * 1000:.1f} ms; pydantic imported: "
            f"{c['pydantic_imported']})",
            "met": c["total_s"] <= 0.015,
        }
    return out


def markdown(f: dict[str, Any], json_name: str) -> list[str]:
    """The discovery section of docs/performance.md."""
    lines = [
        HEADING,
        "",
        "A fresh interpreter imports Paddle and flexq (the baseline), then times "
        "`flexq.list_formats()` (entry points, every installed format's plugin object) and "
        "the first `flexq.compose(path)`; the whole-process wall time of the same child "
        "without that step is the baseline subtracted. Formats' detection, config models "
        "(pydantic) and decoders are imported only when a checkpoint of theirs is composed. "
        f"{f['rounds']} alternating rounds, medians, on a machine shared with other jobs. "
        f"Figures in `{json_name}` (`nox -s bench -- discovery`).",
        "",
    ]
    return [*lines, *goals_table(goals(f)), ""]


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], sys.argv[2] == "1")))
