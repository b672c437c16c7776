"""The timing loop of the format packages' dequantize benches (``packages/*/bench/``).

For bench scripts, not tests (tests assert no wall clock): each run decodes a whole
logical tensor into an output written before (as a model's parameters are), beside
``np.copyto`` of as many float32 bytes, the baseline measured in the same rounds;
every run is warmed up once, then the runs alternate round by round so drift on a
shared machine hits all alike, and each figure is a median. A bfloat16 run decodes as
``flexq.load_state_dict`` does for bfloat16 host targets (through one float32 work
array, or rounded by the format into the target where it can: ``rounded_out``), its
figure GB/s of float32-sized output (so both divide by the same memcpy).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.plan import TargetSlice

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.io.writer import RawTensor
    from flexq.transform import ComposedTransform

Run = Callable[[], object]


def seconds(fn: Run) -> float:
    """Wall seconds of one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


#: Outputs by shape (float32 out, float32 working buffer, bfloat16 bits out), for runs
#: of one bench to share, as a model's parameters are written before.
Outputs = dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]]


def dequantize_runs(
    ct: Composition | ComposedTransform,
    key: str,
    name: str,
    *,
    bfloat16: bool = True,
    outputs: Outputs | None = None,
) -> dict[str, Run]:
    """``{name: float32 decode}`` (and ``{name}_bf16``: bfloat16 through a float32 working
    buffer, as a load into bfloat16 targets does) of the whole of logical ``key``, into
    outputs written before (``outputs`` shares them between runs of one shape); its
    sources are read here, once."""
    shape = tuple(ct.entries[key].shape)
    plan = ct.plan(key, TargetSlice.whole(shape, "float32"))
    sources = ct.read_sources(plan)
    shared = {} if outputs is None else outputs
    if shape not in shared:
        shared[shape] = tuple(np.ones(shape, t) for t in (np.float32, np.float32, np.uint16))  # type: ignore[assignment]
    into, work, into16 = shared[shape]
    runs: dict[str, Run] = {name: lambda: ct.decode(key, sources, plan, "float32", out=into)}
    if bfloat16:
        runs[f"{name}_bf16"] = lambda: ct.decode(
            key, sources, plan, "bfloat16", out=into16, scratch=work
        )
    return runs


def gbps(runs: Mapping[str, Run], out_bytes: int, rounds: int) -> dict[str, float]:
    """``{name}_gbps``: median GB/s of float32 output of each run, and ``memcpy_gbps``
    (``np.copyto`` of ``out_bytes``), over ``rounds`` alternating rounds."""
    src = np.ones(out_bytes // 4, dtype=np.float32)
    dst = np.ones_like(src)
    timed: dict[str, Run] = {**runs, "memcpy": lambda: np.copyto(dst, src)}
    for fn in timed.values():  # warm-up: page faults and allocator growth
        fn()
    times: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(rounds):
        for name, fn in timed.items():
            times[name].append(seconds(fn))
    return {f"{name}_gbps": out_bytes / statistics.median(t) / 1e9 for name, t in times.items()}


@dataclass(frozen=True)
class Case:
    """One timed decode of a bench: a checkpoint's tensors (and ``config.json``), the
    logical key decoded whole, and whether a bfloat16 run goes beside the float32 one."""

    tensors: Mapping[str, RawTensor]
    key: str
    config: Mapping[str, Any] | None = None
    bfloat16: bool = True


def measure_cases(fmt: str, cases: Mapping[str, Case], rounds: int) -> dict[str, float]:
    """:func:`measure_checkpoints` of every case, each written to a scratch checkpoint."""
    from flexq import save_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        paths = {
            name: save_checkpoint(f"{tmp}/{name}", case.tensors, config=case.config)
            for name, case in cases.items()
        }
        checkpoints = {name: (paths[name], case.key) for name, case in cases.items()}
        bfloat16 = {name: case.bfloat16 for name, case in cases.items()}
        return measure_checkpoints(fmt, checkpoints, rounds, bfloat16=bfloat16)


def measure_checkpoints(
    fmt: str,
    checkpoints: Mapping[str, tuple[str | Path, str]],
    rounds: int,
    *,
    bfloat16: Mapping[str, bool] | None = None,
) -> dict[str, float]:
    """:func:`gbps` of every case (``{name}_gbps``, ``{name}_bf16_gbps`` unless
    ``bfloat16[name]`` is false) and of memcpy, for checkpoints a bench wrote (``name ->
    (path, logical key)``, as a format's own writer saves them): each composed with format
    ``fmt`` alone, its sources read once (no file I/O in the timed part). Every case
    decodes to the same number of float32 bytes, the memcpy baseline's."""
    from flexq.compose import composition_of

    runs: dict[str, Run] = {}
    outputs: Outputs = {}
    sizes: set[int] = set()
    for name, (path, key) in checkpoints.items():
        ct = composition_of(path, [fmt])
        bf16 = True if bfloat16 is None else bfloat16.get(name, True)
        runs.update(dequantize_runs(ct, key, name, bfloat16=bf16, outputs=outputs))
        sizes.add(4 * int(np.prod(ct.entries[key].shape)))
        ct.checkpoint.close()
    if len(sizes) != 1:
        raise ValueError(f"the cases of a {fmt} bench decode to different sizes: {sorted(sizes)}")
    return gbps(runs, sizes.pop(), rounds)


def report(title: str, figures: Mapping[str, float]) -> str:
    """``title``, then a line per figure (``  nf4_gbps   3.21 GB/s``), for a bench's main."""
    width = max(map(len, figures), default=0)
    return "\n".join([f"{title}:", *(f"  {k:{width}s} {v:7.2f} GB/s" for k, v in figures.items())])
