"""docs/scale.md from one run of the scale series (:mod:`bench.scale`), for users planning a
multi-node load: what each rank and node cost here, and what that projects to for DeepSeek-V3.

Run by ``bench/run.py``; ``python -m bench.scale_report bench/results/<date>-scale.json``
writes the page again from a results file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GB = 1e9
MiB = 1 << 20

# DeepSeek-V3 as its config.json and model card give it (the projection's only inputs).
V3_PARAMS = 671e9
V3_HIDDEN, V3_VOCAB = 7168, 129280
#: Embedding and LM head, kept BF16 by DeepSeek's FP8 checkpoint.
V3_BF16_PARAMS = 2 * V3_HIDDEN * V3_VOCAB
#: Files of the published checkpoint (model-000NN-of-000163.safetensors).
V3_FILES = 163
BLOCK_ELEMENTS = 128 * 128
#: (label, nodes, GPUs per node).
CLUSTERS = [("2 x 8 GPUs", 2, 8), ("4 x 8 GPUs", 4, 8)]
#: Per-node read bandwidths the projection uses, GB/s.
SPEEDS = [
    ("one NVMe Gen4 drive", 7.0),
    ("four NVMe Gen4 drives", 28.0),
    ("100 Gb/s network storage", 12.5),
    ("400 Gb/s network storage", 50.0),
]


def v3_checkpoint_bytes() -> float:
    """FP8 linears with one F32 scale per 128x128 block, BF16 embedding and head."""
    fp8 = V3_PARAMS - V3_BF16_PARAMS
    return fp8 + 4 * fp8 / BLOCK_ELEMENTS + 2 * V3_BF16_PARAMS


def _gb(n: float) -> str:
    return f"{n / GB:.2f} GB" if n < 10 * GB else f"{n / GB:.0f} GB"


def _mib(n: float) -> str:
    return f"{n / MiB:.1f} MiB"


def _share(n: float) -> str:
    return f"{n:.3f}"


def _s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 10 else f"{seconds:.2f} s"


def _rate(r: dict[str, Any]) -> float:
    """Checkpoint bytes the rank needed (its planned boxes) per second of its load."""
    return float(r["planned_bytes"]) / float(r["seconds"])


def measured_table(results: dict[str, Any]) -> list[str]:
    """One row per config x engine."""
    data = results["checkpoint_file_bytes"]
    rows = [
        "| ranks | engine | load time (slowest rank) | bytes its loader read per rank "
        "(share of the checkpoint) | needed bytes/s per rank | peak RSS above targets per "
        "rank | pieces planned per rank (planning time) | exact |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, config in results["configs"].items():
        for engine, run in config["engines"].items():
            ranks = run["ranks"]
            shares = ", ".join(_share(r["bytes_read"] / data) for r in ranks)
            rates = [_rate(r) for r in ranks]
            rss = [r["peak_rss_above_targets"] for r in ranks]
            pieces = sorted({r["pieces"] for r in ranks})
            plan = max(r["plan_seconds"] for r in ranks)
            rows.append(
                f"| {label} | {engine} | {_s(run['seconds'])} | {shares} | "
                f"{min(rates) / GB:.2f}-{max(rates) / GB:.2f} GB/s | "
                f"{_mib(min(rss))}-{_mib(max(rss))} | "
                f"{'/'.join(map(str, pieces))} ({plan * 1000:.0f} ms) | "
                f"{'yes' if run['exact'] else 'NO'} |"
            )
    return rows


def disk_table(results: dict[str, Any]) -> list[str]:
    """One row per config x engine x node: disk bytes of the node's ranks vs their page floor."""
    data = results["checkpoint_file_bytes"]
    rows = [
        "| ranks | engine | node | read from disk by its ranks' processes (share of the "
        "checkpoint) | page floor of its ranks' slices (share) | disk / floor | its copy in "
        "the page cache after the load (share) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, config in results["configs"].items():
        for engine, run in config["engines"].items():
            for n, node in enumerate(run["nodes"]):
                read, floor = node["read_bytes_of_ranks"], node["page_floor_bytes"]
                resident = node["checkpoint_disk_bytes"]
                rows.append(
                    f"| {label} | {engine} | {n} | {_gb(read)} ({_share(read / data)}) | "
                    f"{_gb(floor)} ({_share(floor / data)}) | {read / floor:.2f} | "
                    f"{_gb(resident)} ({_share(resident / data)}) |"
                )
    return rows


def _direct(results: dict[str, Any], label: str) -> dict[str, Any]:
    return dict(results["configs"][label]["engines"]["direct"])


def projection(results: dict[str, Any]) -> list[str]:
    """DeepSeek-V3 on 2 x 8 and 4 x 8 GPUs, from the model's size and this run's rates."""
    total = v3_checkpoint_bytes()
    four = _direct(results, "4 ranks")
    # One rank with this machine to itself: at 2 and 4 ranks the ranks share its cores.
    rate = _rate(_direct(results, "1 rank")["ranks"][0])
    fc = results["configs"]["4 ranks"]["engines"]["flexcheckpoint"]
    fc_extra = max(r["peak_rss_above_targets"] for r in fc["ranks"])
    direct_extra = max(r["peak_rss_above_targets"] for r in four["ranks"])
    file_bytes = total / V3_FILES
    lines = [
        f"Inputs: {V3_PARAMS / 1e9:.0f}B parameters, FP8 E4M3 linears with one F32 scale per "
        f"128x128 block, BF16 embedding and LM head ({V3_BF16_PARAMS / 1e9:.2f}B parameters): "
        f"a checkpoint of about {_gb(total)} in {V3_FILES} files of about {_gb(file_bytes)}. "
        "Layout: routed experts expert-parallel, attention, shared experts and the "
        "vocabulary tensor-parallel, norms and routers replicated (a few MB), so each rank "
        "needs 1/N of the checkpoint plus the scale blocks its cuts go through, as the "
        "measured runs above show at 2 and 4 ranks.",
        "",
        "| cluster | bytes per rank | memory per rank, dequantized to BF16 | memory per "
        f"rank, kept FP8 | load at this run's 1-rank rate ({rate / GB:.2f} GB/s of "
        "checkpoint, CPU dequantize) | "
        + " | ".join(f"load at {name} ({speed:.1f} GB/s per node)" for name, speed in SPEEDS)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(SPEEDS),
    ]
    for label, nodes, per_node in CLUSTERS:
        n = nodes * per_node
        per_rank = total / n
        bf16 = 2 * V3_PARAMS / n
        kept = per_rank
        node_bytes = per_rank * per_node
        speeds = " | ".join(_s(node_bytes / (speed * GB)) for _, speed in SPEEDS)
        lines.append(
            f"| {label} ({n} ranks) | {_gb(per_rank)} | {_gb(bf16)} | {_gb(kept)} | "
            f"{_s(per_rank / rate)} | {speeds} |"
        )
    lines += [
        "",
        "Dequantized BF16 weights take twice the FP8 bytes: on 2 x 8 GPUs of 80 GB they do not "
        "fit at all (the weights alone exceed a GPU), kept FP8 they take about half of one. "
        "The NVMe and network columns assume the node's disk or link is the bottleneck and "
        "each node reads only its own ranks' slices once (what flexq's direct engine reads: "
        "the 2-node rows above); the 1-rank-rate column is one rank decoding on this "
        "machine's CPU with its cores to itself (a GPU rank decodes far faster) and says how "
        "far a CPU-bound load is from the storage bound.",
        "",
        "**Where FlexCheckpoint's whole-file + broadcast design spends its time.** Its loader "
        "gives each file to one rank, which reads it whole and sends every box another rank "
        "needs to that rank over the collective group:",
        "",
    ]
    for label, nodes, per_node in CLUSTERS:
        n = nodes * per_node
        per_rank = total / n
        remote = per_rank * (n - 1) / n
        off_node = per_rank * (nodes - 1) / nodes
        link = 25.0 * GB  # 200 Gb/s per node
        lines.append(
            f"- {label}: {V3_FILES} files over {n} ranks is {V3_FILES // n}-"
            f"{-(-V3_FILES // n)} whole files ({_gb(file_bytes)} each) per reading rank; of "
            f"the {_gb(per_rank)} each rank needs, {_gb(remote)} comes from another rank's file "
            f"and {_gb(off_node)} from another node's: {_gb(off_node * per_node)} per node "
            f"over the interconnect, {_s(off_node * per_node / link)} at 200 Gb/s per node if "
            "it overlapped perfectly with the reads (it does not: a box can only be sent once "
            "its whole file has been read). Each "
            f"reading rank also holds a whole file above its targets (here: "
            f"{_mib(fc_extra)} per rank vs {_mib(direct_extra)} for flexq's direct engine at "
            f"4 ranks; on V3 about {_gb(file_bytes)}), and its metadata exchange gathers every "
            "rank's keys on every rank (grows as keys x ranks; flexq's planning is per rank, "
            "the pieces column above)."
        )
    return lines


def _fc_nodes(results: dict[str, Any]) -> str:
    """What FlexCheckpoint's engine did with the files on 2 nodes, from the run."""
    run = results["configs"]["2 nodes x 2 ranks"]["engines"]["flexcheckpoint"]
    files = [
        sum(r["files_loaded_by_paddle"] for r in run["ranks"][2 * n : 2 * n + 2]) for n in (0, 1)
    ]
    data = results["checkpoint_file_bytes"]
    shares = [
        _share(sum(r["bytes_read"] for r in run["ranks"][2 * n : 2 * n + 2]) / data) for n in (0, 1)
    ]
    return (
        f"FlexCheckpoint's engine gave node 0's ranks {files[0]} of the {results['files']} "
        f"files and node 1's {files[1]}; each node read its files whole ({shares[0]} and "
        f"{shares[1]} of the checkpoint, below the page floor because every box a rank "
        "needs from the other node's files crossed the collective group instead)."
    )


def write_markdown(results: dict[str, Any], json_path: Path) -> Path:
    """Write docs/scale.md from ``results`` (read from ``json_path``); returns its path."""
    out = ROOT / "docs" / "scale.md"
    out.write_text(render(results, json_path.name))
    return out


def render(results: dict[str, Any], json_name: str) -> str:
    """The text of docs/scale.md for ``results``, the contents of bench/results/``json_name``."""
    shape = results["shape"]
    data = results["checkpoint_file_bytes"]
    dropped = results["page_cache_dropped_before_each_load"]
    two = results["configs"]["2 nodes x 2 ranks"]["engines"]
    worst = max(n["read_bytes_of_ranks"] / n["page_floor_bytes"] for n in two["direct"]["nodes"])
    lines = [
        "# Loading across ranks and nodes",
        "",
        f"<!-- generated by bench/run.py (bench/scale_report.py) from "
        f"bench/results/{json_name}; do not edit by hand -->",
        "",
        f"Measured {results['date']} on {results['machine']['cpus']} shared CPU cores "
        f"(Paddle {results['machine']['paddle']}, CPU build, gloo): a DeepSeek-shaped "
        f"block-FP8 checkpoint of {shape['layers']} layers (hidden {shape['hidden']}, "
        f"{shape['experts']} routed experts and a shared expert of width {shape['inter']}, "
        f"which cuts 128-blocks on 2- and 4-way splits), {_gb(data)} in {results['files']} "
        f"files, loaded into {results['targets']} targets laid out as a serving job shards "
        "it: attention and shared expert tensor-parallel (column Shard(0), row Shard(1)), "
        "routed experts expert-parallel, norms and routers replicated. Every load is a real "
        "`python -m paddle.distributed.launch` (two launchers with `--nnodes 2` and a "
        "loopback master for 2 nodes), each simulated node reading its own copy of the files, "
        + (
            "the page cache dropped before each load (`sync; echo 3 > /proc/sys/vm/drop_caches`)."
            if dropped
            else "**the page cache NOT dropped (not root): disk figures are not cold**."
        )
        + f" Fastest of {results['repeats']} launch(es) per row. `direct` is flexq's default "
        "engine on several CPU ranks; `flexcheckpoint` fetches the same boxes through "
        "Paddle's own loader and resharder.",
        "",
        "## Per rank",
        "",
        *measured_table(results),
        "",
        "Bytes per rank: flexq's direct engine reads each rank's boxes and the scale blocks "
        "covering them (`LoadReport.bytes_read`, 1/N plus the replicated tensors); "
        "FlexCheckpoint's loader reads whole files on the ranks it gives them to (counted "
        "by wrapping `paddle.load`), and some ranks read none. Needed bytes/s: the "
        "checkpoint bytes of the rank's own boxes over its load time. Peak RSS above "
        "targets counts mapped file pages. Pieces: the (logical box -> target box) plans a "
        "rank makes; they are the rank's own boxes, the same number at every world size "
        "for the same per-rank layout (tests/test_multirank.py asserts it at 1, 2, 4 ranks "
        "and 2 nodes).",
        "",
        "## Per node, at the disk",
        "",
        *disk_table(results),
        "",
        "Read from disk: `/proc/<pid>/io` read_bytes over the load, summed over the node's "
        "ranks: the checkpoint pages they fetched, plus the pages of Paddle's own libraries "
        "the dropped cache made them fault in again (about 0.04 GB per node here), so an "
        "upper bound. Page floor: the 4 KiB pages the node's ranks' planned boxes lie on, "
        "counted once per node. Its copy in the page cache after the load (`fincore`, "
        "before anything else reads it): the checkpoint's own disk bytes, unless another "
        "process on this shared machine drops the cache during the load (then lower). "
        f"On 2 nodes flexq's direct engine read {worst:.2f}x the page floor on its worst node "
        + (
            "(issue 24 asks for at most 1.1x: met; the read layer reads the runs a plan needs "
            "with `preadv`, so the kernel adds no read-around; row-parallel Shard(1) slices "
            "still touch most pages of their tensors, which is why the floor is above 1/2). "
            if worst <= 1.1
            else "(issue 24 asks for at most 1.1x: NOT met in this run; the kernel's "
            "read-around pulls in pages next to the slices). "
        )
        + _fc_nodes(results),
        "",
        "## What the engines do with replicas, and with files a node lacks",
        "",
        "- Data-parallel replicas: with the direct engine every rank reads the whole "
        "checkpoint itself (flexq sends no weights between ranks, so no rank waits on "
        "another and no interconnect is used; a node's replicas share its page cache, so "
        "the disk reads a page once per node while it stays cached, and the copies out of "
        "it are per rank; not measured here). `engine='auto'` on a "
        "GPU build picks `flexcheckpoint` when most target elements are replicated: each "
        "file is read once and broadcast.",
        "- Files only some nodes have: every rank opens the checkpoint from its own path "
        "and needs every file of it. A rank whose copy lacks a file stops before any read or "
        "write with `CheckpointError: rank R of N (host H): <dir>: file '<name>' is "
        "missing; this rank was not written ...`. With an engine that communicates "
        "(`flexcheckpoint`, `native`, `auto`) the ranks first agree, so every rank raises "
        "one error naming each rank that failed and nobody waits in a collective "
        "(tests/test_multirank.py, 2 nodes x 2 ranks).",
        "",
        "## DeepSeek-V3 (671B, FP8) on 2 x 8 and 4 x 8 GPUs: a projection",
        "",
        *projection(results),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    path = Path(sys.argv[1])
    print(write_markdown(json.loads(path.read_text()), path))
