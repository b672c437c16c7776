"""Where the time of a default block-FP8 -> float32 load goes (pyinstrument, every 1 ms).

Profiles ``flexq.load_state_dict(state, path)`` (the defaults) into initialised
float32 Paddle targets, after one warm-up load in the same process (the cold
start is :mod:`bench.fresh`'s), and attributes the samples to the pipeline's
steps by the functions they were in (the outermost matching frame wins, so
nothing counts twice; the scale checks a format's own apply runs count as decode).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import flexq
from bench.checkpoints import SIDE, fp8_keys

DECODE = "decode (the format's apply; the pre-write probe included)"
#: step -> function names (pyinstrument's ``function`` field) that belong to it.
STEPS = {
    DECODE: {"flexq_apply"},
    "  of which the bands on the worker threads": {"run_in_bands"},
    "declared-scale checks before the first write": {"check_scales"},
    "writes into targets that were not decoded in place": {"write"},
    "drop each piece's mapped pages (madvise)": {"unmap_pages"},
    "AOA mapping and plans": {"plan_pieces"},
    "compose (headers, plugin detection)": {"compose"},
}


def _walk(frame: Any, found: dict[str, float], in_decode: bool = False) -> None:
    for step, names in STEPS.items():
        if frame.function not in names or (in_decode and not step.startswith(" ")):
            continue
        found[step] = found.get(step, 0.0) + frame.time
        if step != DECODE:
            return
        in_decode = True
    for child in frame.children:
        _walk(child, found, in_decode)


def profile(path: Path, n: int, rounds: int, text_out: Path) -> dict[str, Any]:
    """Seconds per step (per load) and the share of the load each takes."""
    import paddle
    from pyinstrument import Profiler

    keys = fp8_keys(n)
    state = {k: paddle.zeros([SIDE, SIDE], dtype="float32") for k in keys}
    flexq.load_state_dict(state, path)
    profiler = Profiler(interval=0.001)
    profiler.start()
    for _ in range(rounds):
        flexq.load_state_dict(state, path)
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
        "rounds": rounds,
        "seconds_per_load": total / rounds,
        "steps_s": per_load,
        "steps_share": {k: v / (total / rounds) for k, v in per_load.items()} if total else {},
        "text": text_out.name,
    }
