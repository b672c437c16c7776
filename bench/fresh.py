"""The defaults a user gets, one load per fresh process, alternating with torch DCP.

Each measurement runs in its own interpreter (``python -m bench.fresh KIND CKPT N SIDE``),
as a user runs a load: nothing imported, discovered, composed or started before.
The child imports its framework, allocates its float32 targets and writes them once
(as a model's parameters are after initialisation), resets the kernel's peak-RSS
mark (``/proc/self/clear_refs``), then times one call and reports:

- ``seconds``: the call alone (for flexq ``flexq.load_state_dict(state, path)``
  with no options, after ``import flexq``; for DCP the reader and ``dcp.load``);
- ``peak_extra_rss``: VmHWM minus the RSS before the call, i.e. memory above the
  targets, checkpoint pages mapped into the process counted;
- ``peak_extra_anon``: the highest RssAnon above its pre-call value, sampled
  every 5 ms (memory the call allocated itself).

Kinds: ``flexq`` (the defaults), ``flexq-fp8-only`` (the same with only the fp8
format discovered), ``dcp`` (torch DCP's quantized reader into
torch tensors), ``memcpy`` (the finished values' bytes copied into Paddle
targets of the same kind: the machine's limit for the job) and ``coldstart``
(what a fresh process pays before the first byte, step by step, then a load).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("flexq", "flexq-fp8-only", "dcp", "memcpy", "coldstart")
#: Environment of each kind beyond the parent's: ``flexq-fp8-only`` is the default
#: load with only the fp8 format discovered (``FLEXQ_FORMATS=fp8``), so the other
#: installed formats' import cost shows as the difference.
ENV = {"flexq-fp8-only": {"FLEXQ_FORMATS": "fp8"}}


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
        while not self.done.wait(0.005):
            self.peak = max(self.peak, _status()["RssAnon"])


class Measured:
    """Times one call and the memory it takes above what the process held before."""

    def __enter__(self) -> Measured:
        Path("/proc/self/clear_refs").write_text("5")
        self.before = _status()
        self.sampler = AnonSampler()
        self.sampler.start()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
        self.sampler.done.set()
        self.sampler.join()
        after = _status()
        self.peak_extra_rss = after["VmHWM"] - self.before["VmRSS"]
        self.peak_extra_anon = max(self.sampler.peak, after["RssAnon"]) - self.before["RssAnon"]

    def figures(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "peak_extra_rss": self.peak_extra_rss,
            "peak_extra_anon": self.peak_extra_anon,
        }


def _paddle_targets(n: int, side: int) -> dict[str, Any]:
    import paddle

    from bench.checkpoints import fp8_keys

    return {k: paddle.zeros([side, side], dtype="float32") for k in fp8_keys(n)}


def child_flexq(ckpt: str, n: int, side: int) -> dict[str, Any]:
    """One default load: ``flexq.load_state_dict(state, path)``, nothing else."""
    state = _paddle_targets(n, side)
    start = time.perf_counter()
    import flexq

    imported = time.perf_counter() - start
    with Measured() as m:
        report = flexq.load_state_dict(state, ckpt)
    return {
        **m.figures(),
        "import_flexq_s": imported,
        "engine": report.engine,
        "batches": report.batches,
        "bytes_read": report.bytes_read,
    }


def child_dcp(ckpt: str, n: int, side: int) -> dict[str, Any]:
    """torch DCP's ``QuantizedHuggingFaceStorageReader`` into initialised torch tensors."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.quantized_hf_storage import (
        QuantizedHuggingFaceStorageReader,
    )

    from bench.checkpoints import BLOCK, fp8_keys

    state = {k: torch.zeros((side, side), dtype=torch.float32) for k in fp8_keys(n)}
    with Measured() as m:
        reader = QuantizedHuggingFaceStorageReader(
            ckpt, target_dtype=torch.float32, block_size=BLOCK
        )
        dcp.load(state, storage_reader=reader)
    return {**m.figures(), "threads": torch.get_num_threads()}


def child_memcpy(ckpt: str, n: int, side: int) -> dict[str, Any]:
    """The same bytes copied into the same kind of targets (initialised Paddle float32)."""
    import numpy as np

    state = _paddle_targets(n, side)
    values = [np.ones((side, side), dtype=np.float32) for _ in range(n)]
    with Measured() as m:
        for v, t in zip(values, state.values(), strict=True):
            np.copyto(np.from_dlpack(t), v)
    return m.figures()


def child_coldstart(ckpt: str, n: int, side: int) -> dict[str, Any]:
    """Seconds of each step a fresh process pays before flexq writes its first byte,
    in the order a load meets them, then the load itself (its cold costs now paid)."""
    steps: dict[str, float] = {}
    start = time.perf_counter()
    import paddle

    steps["import paddle (the caller's, not flexq's)"] = time.perf_counter() - start
    state = _paddle_targets(n, side)
    mark = time.perf_counter()
    import flexq

    steps["import flexq"] = time.perf_counter() - mark
    mark = time.perf_counter()
    formats = flexq.list_formats()
    steps["entry-point discovery and format imports"] = time.perf_counter() - mark
    mark = time.perf_counter()
    flexq.compose(ckpt).checkpoint.close()
    steps["first compose (headers, detection, config parsing)"] = time.perf_counter() - mark
    from flexq.formatkit.threads import run_on_threads

    mark = time.perf_counter()
    run_on_threads(lambda part: None, list(range(8)), 1)
    steps["worker thread pool start"] = time.perf_counter() - mark
    del paddle
    with Measured() as m:
        flexq.load_state_dict(state, ckpt)
    return {"steps_s": steps, "formats": len(formats), "warm_load_s": m.seconds}


CHILDREN = {
    "flexq": child_flexq,
    "flexq-fp8-only": child_flexq,
    "dcp": child_dcp,
    "memcpy": child_memcpy,
    "coldstart": child_coldstart,
}


def compile_workspace() -> int:
    """Write the bytecode of every workspace package and of the bench, as ``pip install``
    writes it for an installed flexq: the editable workspace's ``.pyc`` files are written
    on import only, and never where ``PYTHONDONTWRITEBYTECODE`` is set, which would leave
    every fresh process of a series compiling the modules a load imports (several ms of
    an 80 ms discovery, measured). Returns the number of files compiled afresh."""
    import compileall
    import io
    from contextlib import redirect_stdout

    sources = [*sorted((ROOT / "packages").glob("*/src")), ROOT / "bench"]
    listing = io.StringIO()
    with redirect_stdout(listing):  # compileall prints one line per file it compiles
        for path in sources:
            compileall.compile_dir(path, quiet=0)
    return sum(line.startswith("Compiling") for line in listing.getvalue().splitlines())


def run_child(kind: str, ckpt: Path, n: int, side: int) -> dict[str, Any]:
    """Run one child in a fresh interpreter and return its figures."""
    return run_module("bench.fresh", [kind, str(ckpt), str(n), str(side)], ENV.get(kind, {}))


def run_module(module: str, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """``python -m module *args`` in a fresh interpreter; the JSON its last line prints."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={**os.environ, "GLOG_minloglevel": "2", **(env or {})},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def measure(
    cases: dict[str, tuple[Path, int, int, tuple[str, ...]]],
    rounds: int,
    log: Any = print,
) -> dict[str, Any]:
    """For every case and kind: figures of ``rounds`` fresh processes, with medians.

    :param cases: case name -> (checkpoint dir, linears, side, kinds to run on it).
        Every round runs every (case, kind) once, the order rotated each round, so
        drift on a shared machine hits all alike.
    """
    jobs = [(c, k) for c, (_, _, _, kinds) in cases.items() for k in kinds]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {j: [] for j in jobs}
    for r in range(rounds):
        log(f"fresh processes: round {r + 1} of {rounds}")
        for case, kind in jobs[r % len(jobs) :] + jobs[: r % len(jobs)]:
            path, n, side, _ = cases[case]
            runs[case, kind].append(run_child(kind, path, n, side))
    out: dict[str, Any] = {"rounds": rounds, "cases": {}}
    for case, (path, n, side, kinds) in cases.items():
        entry: dict[str, Any] = {
            "tensors": n,
            "shape": [side, side],
            "targets_bytes": n * side * side * 4,
            "largest_tensor_bytes": side * side * 4,
            "checkpoint_bytes": sum(f.stat().st_size for f in path.glob("*.safetensors")),
            "kinds": {},
        }
        for kind in kinds:
            results = runs[case, kind]
            entry["kinds"][kind] = {"runs": results, **summarize(results)}
        out["cases"][case] = entry
    return out


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and range of every numeric figure the runs share (coldstart: per step)."""
    out: dict[str, Any] = {}
    for key in results[0]:
        if key == "steps_s":
            steps = results[0]["steps_s"]
            out["steps_s"] = {s: _spread([r["steps_s"][s] for r in results]) for s in steps}
        elif isinstance(results[0][key], (int, float)) and not isinstance(results[0][key], bool):
            out[key] = _spread([float(r[key]) for r in results])
    return out


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": float(median(values)), "min": min(values), "max": max(values)}


if __name__ == "__main__":
    kind, path, count, edge = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(CHILDREN[kind](path, count, edge)))
