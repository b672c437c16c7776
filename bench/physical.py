"""Default loads against the machine's own limit: the disk's read time and memcpy (issue 30).

Run by ``nox -s bench`` (every series; its figures fill the main table's physical-limit
column) and ``nox -s bench -- physical`` (this one alone: bench/results/<date>-physical.json
and the physical section of docs/performance.md). Needs root: the cold-system series drops
the page cache (``sync; echo 3 > /proc/sys/vm/drop_caches``), which every job on the
machine feels, so it runs once a round.

Per round, on the 1 GiB block-FP8 checkpoint (16 x 4096^2 into float32, 256 MiB of
files), every figure one fresh process (:mod:`bench.fresh`) or one ``dd`` per file:

- cold, each after the checkpoint's own pages are evicted (``POSIX_FADV_DONTNEED``:
  the files come from disk, the interpreter's modules and libraries stay cached, as on
  a node where the checkpoint is new), in rotating order: ``dd`` of the files
  (``bs=16M``, buffered, and ``iflag=direct``: O_DIRECT, no read-ahead), the default
  load, the default load with its kernel read-ahead (:mod:`flexq.load.readahead`)
  switched off, the default load with its fetch-ahead thread
  (:mod:`flexq.load.fetch_ahead`) switched off, with it forced on (the default runs
  it only where a core is spare beside the worker threads), with each box read in one
  call on the load's thread instead of in row bands on the workers, and with the read-ahead
  window's advice given on the load's thread or (after the first call) on the adviser
  thread, whatever the calls take (the default moves it to the thread once a call shows
  the pages on disk) (the baselines each is measured against, in the same run); each
  load also reports the seconds it waited in its reads (``read_wait_s``), the part of a
  cold load that did not overlap decoding;
- cold-system: the default load after the whole page cache is dropped (``sync; echo 3 >
  /proc/sys/vm/drop_caches``: the modules a load imports late, pydantic's among them,
  come from disk too), for reference;
- warm (the files read into the page cache first): the default load, its baselines,
  and memcpy of the finished values into the same float32 Paddle targets.

On the 200 MB checkpoint (12 x 2048^2) the warm default load alternates with torch DCP's
quantized reader when torch is installed. The physical limit of a load is max(buffered
read time, memcpy time): the disk cannot deliver the files faster, nor memory take the
output faster; a load that overlaps the two perfectly takes exactly that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import fresh, report, vs_dcp
from bench.checkpoints import BASE_TENSORS, BIG_SIDE, SIDE, write_fp8_block
from bench.cold_pages import drop_caches, evict_files
from flexq.numerics.threads import spare_cores

HEADING = "## The physical limit: cold and warm loads against the disk and memcpy (issue 30)"
#: case name -> (linears, side).
CASES = {"1gib": (16, BIG_SIDE), "x1": (BASE_TENSORS, SIDE)}
#: The default load and its baselines: kernel read-ahead off, fetch-ahead thread off,
#: the fetch-ahead thread on though no core is spare (the default leaves it off then),
#: each box read in one call on the load's thread (not in row bands on the workers), and
#: the read-ahead window's advice always on the load's thread, or always (after the first
#: call) on the adviser thread (the default chooses by what the calls take).
LOADS = (
    "flexq",
    "flexq-no-readahead",
    "flexq-no-fetch-ahead",
    "flexq-fetch-ahead-forced",
    "flexq-one-read",
    "flexq-advice-inline",
    "flexq-advice-thread",
)
COLD = ("read-buffered", "read-direct", *LOADS)
WARM = (*LOADS, "memcpy")
MB = 1 << 20
#: the issue's bars
COLD_BAR, WARM_BAR, DCP_BAR = 1.3, 1.2, 0.15


def read_files(files: list[Path], direct: bool) -> float:
    """Seconds ``dd`` takes to read ``files`` one after another (O_DIRECT with ``direct``)."""
    flags = ["iflag=direct"] if direct else []
    start = time.perf_counter()
    for f in files:
        subprocess.run(
            ["dd", f"if={f}", "of=/dev/null", "bs=16M", *flags],
            check=True,
            capture_output=True,
        )
    return time.perf_counter() - start


def child(ckpt: str, n: int, side: int, kind: str) -> dict[str, Any]:
    """A default load (:func:`bench.fresh.child_flexq`) of one of :data:`LOADS`: as it is,
    with its kernel read-ahead window switched off (each piece's pages then read when its
    decode asks for them: what the default did before issue 30), or with its fetch-ahead
    thread switched off (each piece's boxes copied in on the load's thread, between two
    decodes), or with it on though the worker threads take every core, or with every
    box read in one call on the load's thread (no row bands on the workers); and
    ``read_wait_s``: the seconds the load spent in its source's reads, i.e. waiting for
    bytes instead of decoding them."""
    from flexq.load import sources
    from flexq.load.readahead import ReadAhead

    if kind == "flexq-no-readahead":
        ReadAhead.before = lambda self, index: None  # type: ignore[method-assign]
    elif kind == "flexq-no-fetch-ahead":
        sources.DirectSource.fetch_ahead = lambda self, index: None  # type: ignore[method-assign]
    elif kind == "flexq-fetch-ahead-forced":
        sources.spare_cores = lambda: 1  # type: ignore[attr-defined]
    elif kind == "flexq-one-read":
        sources.READ_PART_BYTES = 1 << 62  # no box is large enough to be cut
    elif kind in ("flexq-advice-inline", "flexq-advice-thread"):
        from flexq.load import readahead

        readahead.COLD_CALL_S = float("inf") if kind == "flexq-advice-inline" else 0.0
    waited = [0.0]
    real = sources.DirectSource.boxes

    def timed(self: sources.DirectSource, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real(self, *args, **kwargs)
        finally:
            waited[0] += time.perf_counter() - start

    sources.DirectSource.boxes = timed  # type: ignore[method-assign]
    return {**fresh.child_flexq(ckpt, n, side), "read_wait_s": waited[0]}


def _load(kind: str, path: Path, n: int, side: int) -> dict[str, Any]:
    if kind in LOADS:
        return fresh.run_module("bench.physical", ["--child", kind, str(path), str(n), str(side)])
    return fresh.run_child(kind, path, n, side)


def _one(kind: str, path: Path, n: int, side: int, cold: str | None) -> dict[str, Any]:
    """One figure of ``kind``; ``cold``: "checkpoint" (its files evicted just before) or
    "system" (the whole page cache dropped just before), None for a warm figure."""
    files = sorted(path.glob("*.safetensors"))
    if cold == "system":
        drop_caches()
    elif cold == "checkpoint":
        evict_files(files)
    if kind.startswith("read-"):
        return {"seconds": read_files(files, kind == "read-direct")}
    return _load(kind, path, n, side)


def measure(tmp: Path, rounds: int, log: Any = print) -> dict[str, Any]:
    """Every series of this module over ``rounds`` rounds, checkpoints written into ``tmp``."""
    load_average = f"{os.getloadavg()[0]:.1f}"
    paths = {}
    for name, (n, side) in CASES.items():
        log(f"physical: writing checkpoint {name}: {n} x {side}^2 block-FP8")
        paths[name] = write_fp8_block(tmp / f"fp8-{name}", n, side=side)
    big, (n, side) = paths["1gib"], CASES["1gib"]
    small, (sn, sside) = paths["x1"], CASES["x1"]
    small_kinds = ["flexq", "dcp"] if vs_dcp.torch_available() else ["flexq"]
    for kind in WARM:  # bytecode compiled, untimed
        _load(kind, big, n, side)
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(rounds):
        log(f"physical: round {r + 1} of {rounds}")
        for kind in COLD[r % len(COLD) :] + COLD[: r % len(COLD)]:
            runs.setdefault(f"cold {kind}", []).append(_one(kind, big, n, side, "checkpoint"))
        runs.setdefault("cold-system flexq", []).append(_one("flexq", big, n, side, "system"))
        read_files(sorted(big.glob("*.safetensors")), direct=False)  # back in the cache
        for kind in WARM[r % len(WARM) :] + WARM[: r % len(WARM)]:
            runs.setdefault(f"warm {kind}", []).append(_one(kind, big, n, side, None))
        read_files(sorted(small.glob("*.safetensors")), direct=False)  # the drop evicted it
        for kind in small_kinds[r % 2 :] + small_kinds[: r % 2]:
            runs.setdefault(f"x1 warm {kind}", []).append(_one(kind, small, sn, sside, None))
    series = {name: {"runs": got, **fresh.summarize(got)} for name, got in runs.items()}
    return {
        "rounds": rounds,
        "load_average": load_average,
        "spare_cores": spare_cores(),
        "checkpoint_bytes": sum(f.stat().st_size for f in big.glob("*.safetensors")),
        "targets_bytes": n * side * side * 4,
        "x1_targets_bytes": sn * sside * sside * 4,
        "series": series,
    }


def _median(f: dict[str, Any], name: str) -> float:
    return float(f["series"][name]["seconds"]["median"])


def limit(f: dict[str, Any]) -> float:
    """The 1 GiB load's physical limit: max(buffered read time, memcpy time), medians."""
    return max(_median(f, "cold read-buffered"), _median(f, "warm memcpy"))


def goals(f: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Issue 30's bars from this run's medians."""
    read, copy, lim = _median(f, "cold read-buffered"), _median(f, "warm memcpy"), limit(f)
    cold, warm = _median(f, "cold flexq"), _median(f, "warm flexq")
    out = {
        "physical_cold": {
            "goal": "cold-cache default load, 1 GiB / max(read time, memcpy time)",
            "target": f"<= {COLD_BAR}x",
            "measured": f"{cold / lim:.2f}x ({_ms(cold)} / max({_ms(read)}, {_ms(copy)}))",
            "met": cold <= COLD_BAR * lim,
        },
        "physical_warm": {
            "goal": "warm default load, 1 GiB / memcpy of the output",
            "target": f"<= {WARM_BAR}x",
            "measured": f"{warm / copy:.2f}x ({_ms(warm)} / {_ms(copy)})",
            "met": warm <= WARM_BAR * copy,
        },
    }
    if "x1 warm dcp" in f["series"]:
        mine, dcp = _median(f, "x1 warm flexq"), _median(f, "x1 warm dcp")
        out["physical_dcp"] = {
            "goal": "default load, 200 MB / torch DCP",
            "target": f"<= {DCP_BAR}x",
            "measured": f"{mine / dcp:.2f}x ({_ms(mine)} / {_ms(dcp)})",
            "met": mine <= DCP_BAR * dcp,
        }
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def markdown(f: dict[str, Any], json_name: str) -> list[str]:
    """The physical section of docs/performance.md."""
    lim = limit(f)
    lines = [
        HEADING,
        "",
        f"The 1 GiB block-FP8 checkpoint ({f['checkpoint_bytes'] / (1 << 20):.0f} MiB of files, "
        f"{report._size(f['targets_bytes'])} of float32 targets), {f['rounds']} rounds, every "
        "figure one fresh process (or one `dd` per file), medians and ranges; ratios are of "
        "medians from this run. Cold: the checkpoint's own pages evicted "
        "(`POSIX_FADV_DONTNEED`) just before, so its files come from disk while the "
        "interpreter's modules stay cached (a node where the checkpoint is new); cold-system: "
        "the whole page cache dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`), the modules "
        "a load imports late (pydantic's) read from disk too. Physical limit: max(buffered "
        f"`dd` read time, memcpy time) = {_ms(lim)}. Baselines measured in the same run: "
        "`flexq-no-readahead`, the default load with its kernel read-ahead "
        "(`flexq.load.readahead`) switched off, and `flexq-no-fetch-ahead`, with its "
        "fetch-ahead thread (`flexq.load.fetch_ahead`) switched off, and "
        "`flexq-fetch-ahead-forced`, with it on though no core is spare beside the worker "
        f"threads (the default runs it only beside a spare core; spare here: "
        f"{f.get('spare_cores', 'not recorded')}), and `flexq-one-read`, with each box read "
        "in one call on the load's thread instead of in row bands on the worker threads "
        "(`flexq.load.sources.READ_PART_BYTES`), and `flexq-advice-inline` and "
        "`flexq-advice-thread`, with the read-ahead window's `WILLNEED` advice always given "
        "on the load's thread, or always (after the first call) on the adviser thread, "
        "where the default (`flexq.load.readahead.AdviceThread`) moves it to the thread once "
        "a call takes `COLD_CALL_S` (the pages on disk). "
        f"Figures in `{json_name}` (`nox -s bench -- physical`). Load average when the "
        f"series started: {f.get('load_average', 'not recorded')} on 2 cores (a shared "
        "machine: expect +-20% and more).",
        "",
        "Waiting on reads: the seconds a load spent in its source's reads (waiting for "
        "bytes, not decoding them), median.",
        "",
        "| series | seconds, median (range) | of the physical limit | waiting on reads | "
        "peak RSS above targets |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, s in f["series"].items():
        share = "" if name.startswith("x1 ") else f"{s['seconds']['median'] / lim:.2f}x"
        rss = s.get("peak_extra_rss")
        peak = "" if rss is None else f"{rss['median'] / MB:.1f} MiB (max {rss['max'] / MB:.1f})"
        wait = s.get("read_wait_s")
        waited = "" if wait is None else _ms(wait["median"])
        lines.append(
            f"| {name} | {report._range(s['seconds'], 1000)} | {share} | {waited} | {peak} |"
        )
    lines += ["", "| goal | target | measured | met |", "| --- | --- | --- | --- |"]
    for g in goals(f).values():
        lines.append(f"| {g['goal']} | {g['target']} | {g['measured']} | {g['met']} |")
    return [*lines, ""]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        kind, ckpt, n, side = argv[1], argv[2], int(argv[3]), int(argv[4])
        print(json.dumps(child(ckpt, n, side, kind)))
        return 0
    if os.geteuid() != 0:
        print("bench.physical: evicting the page cache needs root", file=sys.stderr)
        return 2
    print("run it through bench/run.py: `nox -s bench -- physical`", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
