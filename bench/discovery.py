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
pydantic is imported), a plain bf16 checkpoint (no format asked, nothing imported), and
the FP8 checkpoint in a process that imported pydantic before (``fp8-pydantic-imported``:
a serving stack that validates its own requests with it; the baseline imports it too), so
the part of the FP8 figure that is flexq's own, not pydantic's import, shows.
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
CASES = ("fp8", "plain", "fp8-pydantic-imported")
#: Cases whose baseline (and timed child) imports pydantic before flexq.
PYDANTIC_FIRST = frozenset({"fp8-pydantic-imported"})


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


def child(path: str, compose: bool, pydantic_first: bool = False) -> dict[str, Any]:
    """In this fresh process: import Paddle (and, ``pydantic_first``, pydantic's models)
    and flexq, then (``compose``) discovery and the first compose, timed."""
    import paddle  # noqa: F401 - the caller's import, part of the baseline

    if pydantic_first:
        # the caller's own models: BaseModel and field types (pydantic imports lazily)
        from pydantic import BaseModel, Field, PositiveInt  # noqa: F401

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


def _args(path: Path, compose: bool, case: str) -> list[str]:
    return [str(path), str(int(compose)), str(int(case in PYDANTIC_FIRST))]


def _wall(path: Path, compose: bool, case: str) -> float:
    """Whole-process wall seconds of one child (interpreter start to exit)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "bench.discovery", *_args(path, compose, case)],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=300,
    )
    return time.perf_counter() - start


def measure(tmp: Path, rounds: int, log: Any = print) -> dict[str, Any]:
    """Medians over ``rounds`` alternating fresh processes per case."""
    written = write_checkpoints(tmp)
    paths = {case: written[case.split("-")[0]] for case in CASES}
    for case, path in paths.items():  # untimed: bytecode compiled, pages cached
        run_module("bench.discovery", _args(path, True, case))
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CASES}
    walls: dict[str, dict[str, list[float]]] = {c: {"with": [], "baseline": []} for c in CASES}
    for r in range(rounds):
        log(f"discovery: round {r + 1} of {rounds}")
        for case in CASES[r % len(CASES) :] + CASES[: r % len(CASES)]:
            runs[case].append(run_module("bench.discovery", _args(paths[case], True, case)))
            walls[case]["baseline"].append(_wall(paths[case], False, case))
            walls[case]["with"].append(_wall(paths[case], True, case))
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
            f"installed, {_label(case)} (after import paddle, flexq)",
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


def _label(case: str) -> str:
    if case in PYDANTIC_FIRST:
        return "fp8 checkpoint, pydantic imported before (flexq's own part)"
    return f"{case} checkpoint"


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
    return [*lines, *goals_table(goals(f)), *_pydantic_share(f), ""]


def _pydantic_share(f: dict[str, Any]) -> list[str]:
    """What pydantic's own import is of the FP8 figure: the two FP8 cases' difference."""
    cases = f["cases"]
    if not {"fp8", "fp8-pydantic-imported"} <= cases.keys():
        return []
    fp8, own = cases["fp8"]["total_s"], cases["fp8-pydantic-imported"]["total_s"]
    return [
        "",
        f"Of the FP8 checkpoint's {fp8 * 1000:.1f} ms, {(fp8 - own) * 1000:.1f} ms is importing "
        "pydantic, which validates every format's `quantization_config` (the FP8 models among "
        f"them); in a process that has imported it already, flexq's own part is {own * 1000:.1f} "
        "ms. pydantic stays: its messages name the file, field and format of a bad config, and "
        "a hand-written validator would be a second one to keep in step with the models; its "
        "import is paid once per process, and a load of any size pays it once.",
    ]


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], sys.argv[2] == "1", sys.argv[3:4] == ["1"])))
