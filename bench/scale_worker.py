"""One rank of the scale series (started by paddle.distributed.launch from bench.scale).

Usage: ``scale_worker.py CKPT OUT ENGINE DROP SHAPE`` (SHAPE: the
:class:`bench.checkpoints.MoeShape` fields, comma-separated). Loads the MoE
stack into bfloat16 targets laid out as a DeepSeek serving job shards it over
the world: attention and shared experts tensor-parallel (ShardedWeights of the
boxes column Shard(0) / row Shard(1) give), routed experts expert-parallel
(whole, ``experts / world`` per rank), norms and routers replicated. With
DROP = 1, global rank 0 drops the page cache (``sync; echo 3 >
/proc/sys/vm/drop_caches``, root only) between two barriers just before the
load. Writes ``OUT/rank<N>.json`` with this rank's figures and
``OUT/pages<N>.npy``, the (file, page) pairs of the 4 KiB pages its planned
source boxes lie on (the node's page floor is the union over its ranks).

Figures: load seconds; on each node's first rank, the bytes of the node's copy
in the page cache once every rank has loaded (``fincore``: what the load read
from disk, since the cache was dropped and no other node reads that copy);
bytes this rank's loader returned (flexq:
``LoadReport.bytes_read``; flexcheckpoint: the bytes of every file Paddle's
``paddle.load`` read, counted as :mod:`bench.rank_worker` does); bytes read from
disk (``/proc/self/io`` read_bytes over the load); peak RSS above the targets
(VmHWM after the load, reset through ``/proc/self/clear_refs`` once the targets
exist, minus VmRSS then; mapped file pages count); pieces and seconds of a
second, separately timed planning of the same targets; and whether one tensor
of each kind equals the one-process load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

PAGE = 4096


def _status(field: str) -> int:
    """A ``/proc/self/status`` memory figure in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _disk_read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise KeyError("read_bytes")


def drop_page_cache() -> bool:
    """Write back and drop the page cache (root only); False when not allowed."""
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def resident_bytes(directory: Path) -> int:
    """Bytes of ``directory``'s data files in the page cache (util-linux ``fincore``)."""
    files = sorted(str(p) for p in directory.glob("*.safetensors"))
    cmd = ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", *files]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return sum(int(v) for v in out.split())


def targets(shape: Any, world: int, rank: int) -> dict[str, Any]:
    """This rank's bfloat16 targets of the serving layout (see the module)."""
    import paddle
    import paddle.distributed as dist
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight
    from paddle.distributed.flex_checkpoint.dcp.utils import compute_local_shape_and_global_offset

    mesh = dist.ProcessMesh(list(range(world)), dim_names=["x"])
    state: dict[str, Any] = {}
    per = shape.experts // world
    for layer in range(shape.layers):
        fp8 = shape.fp8(layer)
        for key in shape.dense(layer):
            split = dist.Shard(1 if ("o_proj" in key or "down_proj" in key) else 0)
            # ShardedWeight: 3.3.1's CPU kernels cannot shard a bfloat16 dist tensor.
            local, offset = compute_local_shape_and_global_offset(list(fp8[key]), mesh, [split])
            zeros = paddle.zeros(list(local), dtype="bfloat16")
            state[key] = ShardedWeight(key, zeros, tuple(local), fp8[key], tuple(offset))
        for e in range(rank * per, (rank + 1) * per):
            for key in shape.expert(layer, e):
                state[key] = paddle.zeros(list(fp8[key]), dtype="bfloat16")
        for key, dims in shape.bf16(layer).items():
            state[key] = paddle.zeros(list(dims), dtype="bfloat16")
    return state


def pages(ct: Any, pieces: list[Any]) -> np.ndarray:
    """Unique (file number, page) pairs the planned source boxes of ``pieces`` lie on."""
    files = {
        name: i for i, name in enumerate(sorted({t.file for t in ct.checkpoint.tensors.values()}))
    }
    found = []
    for piece in pieces:
        for key, (offset, shape) in piece.plan.source_slices.items():
            info = ct.checkpoint.info(key)
            dims = info.shape if info.shape else (1,)
            item = info.nbytes // max(1, int(np.prod(dims)))
            cols = int(np.prod(dims[1:])) if len(dims) > 1 else dims[0]
            r0, n = (offset[0], shape[0]) if len(dims) > 1 else (0, 1)
            c0, m = (offset[1], shape[1]) if len(dims) > 1 else (offset[0], shape[0])
            if len(dims) > 2 or m == 0 or n == 0:
                c0, m = 0, cols  # whole rows (no 3-D tensors in this checkpoint)
            if c0 == 0 and m == cols:  # whole rows: one run
                runs = np.array(
                    [[info.start + r0 * cols * item, info.start + (r0 + n) * cols * item]]
                )
            else:
                starts = info.start + ((np.arange(r0, r0 + n) * cols) + c0) * item
                runs = np.stack([starts, starts + m * item], axis=1)
            first, last = runs[:, 0] // PAGE, (runs[:, 1] - 1) // PAGE
            counts = last - first + 1
            spans = np.repeat(first, counts) + (
                np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
            )
            found.append(np.stack([np.full(len(spans), files[info.file]), spans], axis=1))
    return np.unique(np.concatenate(found), axis=0) if found else np.zeros((0, 2), np.int64)


def main(ckpt: str, out: str, engine: str, drop: bool, shape: Any) -> None:
    import paddle
    import paddle.distributed as dist

    import flexq
    from bench.rank_worker import _loaded, count_paddle_loads, cuda_shim
    from flexq.compose import composition_of
    from flexq.load.pieces import plan_pieces
    from flexq.load.report import LoadOptions
    from flexq.load.targets import describe

    if engine == "flexcheckpoint":
        cuda_shim()  # BENCH-ONLY: lets 3.3.1's reshard communicators run on a CPU-only build
    count_paddle_loads()
    dist.init_parallel_env()
    world, rank = dist.get_world_size(), dist.get_rank()
    state = targets(shape, world, rank)

    def sync() -> None:  # a 1-rank launch has no process group
        if world > 1:
            dist.barrier()

    sync()
    dropped = drop_page_cache() if drop and rank == 0 else False
    sync()
    Path("/proc/self/clear_refs").write_text("5\n")  # VmHWM := VmRSS
    base_rss, disk0 = _status("VmRSS"), _disk_read_bytes()
    start = time.perf_counter()
    report = flexq.load_state_dict(state, ckpt, engine=engine)  # type: ignore[arg-type]
    seconds = time.perf_counter() - start
    disk, peak = _disk_read_bytes() - disk0, _status("VmHWM") - base_rss
    sync()
    # Every rank has loaded: what of this node's copy is in the page cache now came from
    # disk during the load (the cache was dropped; no other node reads this copy). Taken
    # before the checks below read whole tensors.
    first_of_node = os.environ.get("PADDLE_LOCAL_RANK", "0") == "0"
    resident = resident_bytes(Path(ckpt)) if first_of_node else None
    sync()

    ct = composition_of(ckpt)
    options = LoadOptions(None, 1 << 30, False, None, False, {})
    began = time.perf_counter()
    pieces = plan_pieces(ct, describe(state), options)
    plan_seconds = time.perf_counter() - began
    np.save(Path(out, f"pages{rank}.npy"), pages(ct, pieces))
    exact = {}
    for t in describe(state)[:: max(1, len(state) // 6)]:
        full = paddle.to_tensor(ct.load(t.key, "bfloat16")).astype("float32").numpy()
        box = tuple(slice(o, o + n) for o, n in zip(t.offset, t.local_shape, strict=True))
        exact[t.key] = bool(np.array_equal(t.tensor.astype("float32").numpy(), full[box]))
    figures = {
        "rank": rank,
        "world": world,
        "engine": engine,
        "seconds": seconds,
        "bytes_read": report.bytes_read if engine == "direct" else _loaded["bytes"],
        "planned_bytes": report.planned_bytes,
        "files_loaded_by_paddle": _loaded["files"],
        "disk_read_bytes": disk,
        "page_cache_dropped": dropped,
        "peak_rss_above_targets": peak,
        "target_bytes": sum(2 * int(np.prod(t.local_shape)) for t in describe(state)),
        "pieces": len(pieces),
        "plan_seconds": plan_seconds,
        "exact": exact,
    }
    if resident is not None:
        figures["resident_after_load"] = resident
    Path(out, f"rank{rank}.json").write_text(json.dumps(figures))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.checkpoints import MoeShape

    fields = [int(v) for v in sys.argv[5].split(",")]
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", MoeShape(*fields))
