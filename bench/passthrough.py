"""The passthrough path (plain bf16 tensors) against the naive loaders, one load per fresh process.

For issue 30's passthrough goal: an unquantized checkpoint of 16 bf16 tensors 4096x8192
(1 GiB) loaded into bf16 Paddle targets by

- ``flexq``: ``flexq.load_state_dict(state, path)``, defaults (discovery, compose, plan,
  read: all of it inside the timed call);
- ``safe_open``: ``safetensors.safe_open(file, framework="paddle")`` and
  ``paddle.assign(f.get_tensor(k), target)`` per tensor;
- ``fastsafetensors``: ``fastsafe_open([file], framework="paddle", device="cpu",
  nogds=True)`` and ``paddle.assign`` (CPU, no GPU-direct reads), when it is installed.

Every child allocates its targets first (untimed), then times the load alone; each
returns a checksum of its targets so the parent checks all loaded the same values.
Warm: one untimed child of each kind reads the file into the page cache, then
alternating rounds. Cold: the page cache is dropped (``sync; echo 3 >
/proc/sys/vm/drop_caches``, root only) before every child. ``python bench/run.py
passthrough`` (``nox -s bench -- passthrough``) writes the results and the passthrough
section of docs/performance.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.fresh import Measured, run_module, summarize
from bench.verify_cost import goals_table

HEADING = "## Passthrough: plain bf16 tensors against safe_open and fastsafetensors"
TENSORS, ROWS, COLS = 16, 4096, 8192
KINDS = ("flexq", "safe_open", "fastsafetensors")
DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def keys(n: int = TENSORS) -> list[str]:
    """The checkpoint's tensor names."""
    return [f"model.layers.{i}.mlp.weight" for i in range(n)]


def write_checkpoint(directory: Path, n: int = TENSORS) -> Path:
    """``n`` bf16 tensors ROWS x COLS of varied finite values (their raw bits)."""
    import numpy as np

    from flexq import RawTensor, save_checkpoint

    base = np.arange(ROWS * COLS, dtype=np.uint32).reshape(ROWS, COLS)
    tensors = {}
    for i, key in enumerate(keys(n)):
        # finite bf16 bit patterns (exponent below all-ones), a different one per tensor
        bits = ((base * 2654435761 + i * 40503) >> 7).astype(np.uint16) & np.uint16(0x7EFF)
        tensors[key] = RawTensor("BF16", bits)
    return save_checkpoint(directory, tensors)


def _targets(n: int) -> dict[str, Any]:
    import paddle

    state = {k: paddle.zeros([ROWS, COLS], dtype="bfloat16") for k in keys(n)}
    return state


def _checksum(state: dict[str, Any]) -> int:
    """A checksum of the targets' bits (rows 0, the middle and the last of every tensor)."""
    import numpy as np
    import paddle

    total = 0
    for i, t in enumerate(state.values()):
        bits = np.from_dlpack(t.view(paddle.int16)).view(np.uint16)
        rows = bits[[0, ROWS // 2, ROWS - 1]].astype(np.uint64)
        total += int(rows.sum()) * (i + 1)
    return total


def child(kind: str, path: str, n: int) -> dict[str, Any]:
    """One load of kind ``kind`` in this (fresh) process: seconds and checksum."""
    import paddle

    state = _targets(n)
    file = str(next(Path(path).glob("*.safetensors")))
    # Imports before the timed call, as bench.fresh does: the call is the load alone
    # (for flexq that includes entry-point discovery and compose, which its first
    # load_state_dict does).
    if kind == "flexq":
        import flexq

        with Measured() as m:
            flexq.load_state_dict(state, path)
    elif kind == "safe_open":
        from safetensors import safe_open

        with Measured() as m, safe_open(file, framework="paddle") as f:
            for k in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                paddle.assign(f.get_tensor(k), state[k])
    else:
        from fastsafetensors import fastsafe_open  # type: ignore[import-not-found]

        with (
            Measured() as m,
            fastsafe_open([file], framework="paddle", device="cpu", nogds=True) as f,
        ):
            for k in f.keys():  # noqa: SIM118
                paddle.assign(f.get_tensor(k), state[k])
    return {**m.figures(), "checksum": _checksum(state)}


def fastsafetensors_version() -> str | None:
    """The installed fastsafetensors' version, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fastsafetensors")
    except PackageNotFoundError:
        return None


def can_drop_caches() -> bool:
    """Whether this process may drop the page cache (root, /proc writable)."""
    return os.geteuid() == 0 and os.access(DROP_CACHES, os.W_OK)


def drop_caches() -> None:
    """Write back and drop the page cache (the bench only; never in tests)."""
    subprocess.run(["sync"], check=True)
    DROP_CACHES.write_text("3\n")
    time.sleep(0.2)


def measure(tmp: Path, rounds: int, log: Any = print, n: int = TENSORS) -> dict[str, Any]:
    """Warm and cold medians of every kind over ``rounds`` alternating fresh processes."""
    log(f"passthrough: writing {n} bf16 tensors {ROWS}x{COLS}")
    path = write_checkpoint(tmp / "bf16", n)
    kinds = [k for k in KINDS if k != "fastsafetensors" or fastsafetensors_version()]
    modes = ["warm", *(["cold"] if can_drop_caches() else [])]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {k: [] for k in kinds} for m in modes}
    for kind in kinds:  # untimed: bytecode compiled, the file in the page cache
        run_module("bench.passthrough", [kind, str(path), str(n)])
    for r in range(rounds):
        log(f"passthrough: round {r + 1} of {rounds} ({', '.join(modes)})")
        order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
        for mode in modes:
            for kind in order:
                if mode == "cold":
                    drop_caches()
                runs[mode][kind].append(run_module("bench.passthrough", [kind, str(path), str(n)]))
    sums = {r["checksum"] for m in runs.values() for rs in m.values() for r in rs}
    out: dict[str, Any] = {
        "load_average_at_end": os.getloadavg(),  # the machine is shared: how busy it was
        "tensors": n,
        "shape": [ROWS, COLS],
        "checkpoint_bytes": sum(f.stat().st_size for f in path.glob("*.safetensors")),
        "rounds": rounds,
        "fastsafetensors": fastsafetensors_version(),
        "cold": "cold" in modes,
        "same_values": len(sums) == 1,
        "modes": {},
    }
    for mode, by_kind in runs.items():
        out["modes"][mode] = {k: {"runs": rs, **summarize(rs)} for k, rs in by_kind.items()}
        base = out["modes"][mode]["safe_open"]["seconds"]["median"]
        for k in by_kind:
            entry = out["modes"][mode][k]
            entry["ratio_to_safe_open"] = entry["seconds"]["median"] / base
            entry["rounds_ratio"] = [
                a["seconds"] / b["seconds"]
                for a, b in zip(by_kind[k], by_kind["safe_open"], strict=True)
            ]
    return out


def goals(f: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The issue's passthrough goal per mode, from this run's figures."""
    out = {}
    for mode, by_kind in f["modes"].items():
        q, s = by_kind["flexq"], by_kind["safe_open"]
        fast = by_kind.get("fastsafetensors")
        beside = (
            f"; fastsafetensors {fast['seconds']['median'] * 1000:.0f} ms "
            f"({fast['ratio_to_safe_open']:.2f}x)"
            if fast
            else "; fastsafetensors not installed"
        )
        r = q["rounds_ratio"]
        out[f"passthrough_{mode}"] = {
            "goal": f"passthrough bf16 load of 1 GiB, {mode} page cache: flexq / "
            "safe_open + paddle.assign, fresh processes",
            "target": "<= 1.0x",
            "measured": f"{q['ratio_to_safe_open']:.2f}x ({q['seconds']['median'] * 1000:.0f} ms"
            f" / {s['seconds']['median'] * 1000:.0f} ms; ratio within each round "
            f"{min(r):.2f}-{max(r):.2f}x){beside}",
            "met": q["ratio_to_safe_open"] <= 1.0 and f["same_values"],
        }
    return out


def _times_table(f: dict[str, Any]) -> list[str]:
    """One row per page-cache mode: each kind's median and its ratio to safe_open."""
    rows = [
        "| page cache | flexq | safe_open + assign | fastsafetensors (CPU) |",
        "| --- | --- | --- | --- |",
    ]
    for mode, by_kind in f["modes"].items():
        cells = [
            f"{e['seconds']['median'] * 1000:.0f} ms ({e['ratio_to_safe_open']:.2f}x)"
            if (e := by_kind.get(kind))
            else "not installed"
            for kind in KINDS
        ]
        rows.append(f"| {mode} | {' | '.join(cells)} |")
    return rows


def markdown(f: dict[str, Any], json_name: str) -> list[str]:
    """The passthrough section of docs/performance.md."""
    about = (
        f"{f['tensors']} bf16 tensors {f['shape'][0]}x{f['shape'][1]} "
        f"({f['checkpoint_bytes'] / (1 << 30):.2f} GiB) into bf16 Paddle targets, one load "
        f"per fresh process, {f['rounds']} alternating rounds, medians (the machine is "
        f"shared with other jobs: ratios within one run are the figures to trust); all "
        f"kinds loaded the same values: {f['same_values']}. Figures in `{json_name}` "
        "(`nox -s bench -- passthrough`)."
    )
    return [HEADING, "", about, "", *_times_table(f), "", *goals_table(goals(f)), ""]


if __name__ == "__main__":
    import json

    print(json.dumps(child(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
