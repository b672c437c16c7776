"""Decodes to time and their timing, for the format packages' benches (``packages/format-*/bench``).

Each bench times ``ComposedTransform.dequantize`` of one logical tensor from sources
already in memory into an output written before (as a model's parameters are, and as
memcpy's destination is); a bfloat16 output goes through one float32 work array, as
``flexq.load_state_dict`` does for bfloat16 host targets.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

#: One timed call.
Run = Callable[[], object]

if TYPE_CHECKING:
    from flexq.compose import ComposedTransform
    from flexq.plan import ReadPlan


def dequantizer(
    ct: ComposedTransform,
    key: str,
    plan: ReadPlan,
    sources: Mapping[str, np.ndarray],
    dtype: str = "float32",
) -> Callable[[], object]:
    """A call that dequantizes ``key``'s ``plan`` box into ``dtype`` (float32 or bfloat16),
    its output and work array allocated and written once, here."""
    shape = tuple(int(d) for d in plan.target.local_shape)
    if dtype == "float32":
        into = np.ones(shape, np.float32)
        return lambda: ct.dequantize(key, sources, plan, "float32", out=into)
    into16, work = np.ones(shape, np.uint16), np.ones(shape, np.float32)
    return lambda: ct.dequantize(key, sources, plan, dtype, out=into16, scratch=work)


def decode_runs(path: str | Path, format_name: str, key: str, name: str) -> dict[str, Run]:
    """``{name: float32 decode, name + "_bf16": bfloat16 decode}`` of the whole logical
    tensor ``key`` of the checkpoint at ``path``, composed with ``format_name`` only,
    its components read once here (the timed calls do no file I/O)."""
    from flexq.compose import compose
    from flexq.plan import TargetSlice

    ct = compose(path, [format_name])
    plan = ct.plan(key, TargetSlice.whole(ct.entries[key].shape, "float32"))
    sources = ct.read_sources(plan)
    return {
        name: dequantizer(ct, key, plan, sources),
        f"{name}_bf16": dequantizer(ct, key, plan, sources, "bfloat16"),
    }


def memcpy(shape: tuple[int, ...]) -> Callable[[], object]:
    """The baseline every bench alternates with: ``np.copyto`` of a float32 array of
    ``shape`` into one written before."""
    src, dst = np.ones(shape, np.float32), np.ones(shape, np.float32)
    return lambda: np.copyto(dst, src)


def alternating_gbps(
    runs: Mapping[str, Callable[[], object]], out_bytes: int, rounds: int
) -> dict[str, float]:
    """``<name>_gbps`` for each run: ``out_bytes`` over its median wall time, after one
    untimed call of each (page faults, allocator growth, tables), the runs alternating
    round by round so that drift on a shared machine hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        fn()
    for _ in range(rounds):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {f"{name}_gbps": out_bytes / statistics.median(t) / 1e9 for name, t in times.items()}
