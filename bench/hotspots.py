"""Where the time of a block-FP8 -> float32 load goes (pyinstrument, sampling every 1 ms).

Profiles ``flexq.load_state_dict(..., engine="direct")`` into initialised float32
Paddle targets (atomic or not) and attributes the samples to the pipeline's steps by the functions
they were in (the outermost matching frame wins, so nothing counts twice).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import flexq
from bench.checkpoints import SIDE, fp8_keys

#: step -> function names (pyinstrument's ``function`` field) that belong to it.
STEPS = {
    "read (codes and scales: views of the mapped file)": {"read_sources"},
    "fp8 apply: E4M3 decode + block-scale multiply": {"flexq_apply"},
    "  of which the bands on the worker threads": {"for_bands"},
    "numpy -> Paddle copy (paddle.to_tensor)": {"to_paddle"},
    "write into targets (assign_sharded_slice)": {"_write"},
    "AOA mapping and plans": {"plan_pieces", "plan"},
    "compose (headers, plugin detection)": {"compose"},
    "drop mapped pages after each batch": {"unmap_pages"},
}

#: steps whose frames contain another step's frames.
NESTING = {"fp8 apply: E4M3 decode + block-scale multiply"}


def _walk(frame: Any, found: dict[str, float]) -> None:
    for step, names in STEPS.items():
        if frame.function in names:
            found[step] = found.get(step, 0.0) + frame.time
            if step not in NESTING:
                return
    for child in frame.children:
        _walk(child, found)


def profile(path: Path, n: int, rounds: int, text_out: Path, atomic: bool) -> dict[str, Any]:
    """Seconds per step (per load) and the share of the load each takes."""
    import paddle
    from pyinstrument import Profiler

    keys = fp8_keys(n)
    state = {k: paddle.zeros([SIDE, SIDE], dtype="float32") for k in keys}
    flexq.load_state_dict(state, path, engine="direct", atomic=atomic)
    profiler = Profiler(interval=0.001)
    profiler.start()
    for _ in range(rounds):
        flexq.load_state_dict(state, path, engine="direct", atomic=atomic)
    session = profiler.stop()
    text_out.write_text(profiler.output_text(unicode=False, color=False))
    root = session.root_frame()
    total = root.time if root is not None else 0.0
    steps: dict[str, float] = {}
    if root is not None:
        _walk(root, steps)
    per_load = {k: v / rounds for k, v in steps.items()}
    counted = sum(v for k, v in per_load.items() if not k.startswith(" "))
    per_load["other (Python glue, validation, Paddle ops)"] = max(0.0, total / rounds - counted)
    return {
        "atomic": atomic,
        "rounds": rounds,
        "seconds_per_load": total / rounds,
        "steps_s": per_load,
        "steps_share": {k: v / (total / rounds) for k, v in per_load.items()} if total else {},
        "text": text_out.name,
    }
