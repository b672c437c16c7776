"""Disk bytes of a simulated node's ranks against the page floor of their slices, cold cache.

Usage (as root, it evicts the page cache): ``python -m bench.cold_pages [--ranks 4]
[--linears 8] [--side 2048] [--rounds 1]``. For each layout, column-parallel
``Shard(0)`` (row bands) and row-parallel ``Shard(1)`` (column bands: every 4 KiB page
of a tensor holds a piece of every rank's slice once rows are narrower than pages
times ranks), the page cache is evicted (``sync; echo 3 > /proc/sys/vm/drop_caches``),
then each rank of a node loads its slices of a block-FP8 checkpoint with the direct
engine, in a fresh process of its own, all of a node's ranks at once (sharing its page
cache). Printed per node:

- ``disk``: the ranks' ``/proc/self/io`` ``read_bytes`` during their loads, summed
  (what the node fetched from disk; compose and imports happen before, untimed);
- ``floor``: the page floor of the node, the distinct 4 KiB pages of the byte ranges
  its ranks' slices name (weights, and the scale blocks covering them), computed here
  from the headers, independently of the reader;
- ``disk / floor`` (the goal: at most 1.1) and the ranks' own ``pages_read_bytes``.

The scale bench can reuse :func:`node_floor` and :func:`run_node` for its nodes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = 4096
LAYOUTS = ("Shard(0)", "Shard(1)")


def band(side: int, axis: int, rank: int, ranks: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(offset, shape) of rank ``rank``'s slice of a ``side`` x ``side`` weight."""
    width = side // ranks
    offset, shape = [0, 0], [side, side]
    offset[axis], shape[axis] = rank * width, width
    return (offset[0], offset[1]), (shape[0], shape[1])


def _pages(
    start: int,
    itemsize: int,
    full: tuple[int, ...],
    offset: tuple[int, int],
    shape: tuple[int, int],
) -> set[int]:
    """The pages of a 2-D box of a C-order tensor stored from byte ``start``."""
    row = full[1] * itemsize
    out: set[int] = set()
    for r in range(offset[0], offset[0] + shape[0]):
        lo = start + r * row + offset[1] * itemsize
        hi = lo + shape[1] * itemsize
        out.update(range(lo // PAGE, (hi - 1) // PAGE + 1))
    return out


def node_floor(ckpt: Path, side: int, block: int, layout: str, ranks: list[int], world: int) -> int:
    """Page floor of ``ranks``' slices (weights and their covering scale blocks)."""
    import flexq

    axis = LAYOUTS.index(layout)
    ck = flexq.Checkpoint(ckpt)
    pages: set[tuple[str, int]] = set()
    try:
        for key in ck:
            if key.endswith("_scale_inv"):
                continue
            w, s = ck.info(key), ck.info(key + "_scale_inv")
            for rank in ranks:
                offset, shape = band(side, axis, rank, world)
                pages |= {(w.file, p) for p in _pages(w.start, 1, w.shape, offset, shape)}
                lo = [o // block for o in offset]
                hi = [-(-(o + n) // block) for o, n in zip(offset, shape, strict=True)]
                s_box = ((lo[0], lo[1]), (hi[0] - lo[0], hi[1] - lo[1]))
                pages |= {(s.file, p) for p in _pages(s.start, 4, s.shape, *s_box)}
    finally:
        ck.close()
    return len(pages) * PAGE


def drop_caches() -> None:
    """Evict the page cache (root only): the next reads come from disk."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def evict_files(files: list[Path]) -> None:
    """Evict these files' pages from the page cache, and nothing else: their next reads
    come from disk while the interpreter's modules and libraries stay cached, as on a
    node where the checkpoint is new and the software is not (``POSIX_FADV_DONTNEED``
    drops clean pages, so each file is flushed first)."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no read_bytes")


def child(
    ckpt: str, warm: str, layout: str, rank: int, world: int, side: int, linears: int
) -> dict[str, Any]:
    """One rank: its ShardedWeight targets loaded with the direct engine."""
    import paddle
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

    import flexq
    from bench.checkpoints import fp8_keys

    def targets(keys: list[str], edge: int) -> dict[str, Any]:
        offset, shape = band(edge, LAYOUTS.index(layout), rank, world)
        return {
            k: ShardedWeight(k, paddle.zeros(list(shape), "float32"), shape, (edge, edge), offset)
            for k in keys
        }

    # A warm-up load of another checkpoint: every lazy import done before the count.
    flexq.load_state_dict(targets(fp8_keys(4), 512), warm, engine="direct")
    state = targets(fp8_keys(linears), side)
    before = _read_bytes()
    start = time.perf_counter()
    report = flexq.load_state_dict(state, ckpt, engine="direct")
    seconds = time.perf_counter() - start
    return {
        "disk": _read_bytes() - before,
        "seconds": seconds,
        "bytes_read": report.bytes_read,
        "pages_read_bytes": getattr(report, "pages_read_bytes", None),
        "disk_read_bytes": getattr(report, "disk_read_bytes", None),
    }


def run_node(
    ckpt: Path, warm: Path, layout: str, ranks: list[int], world: int, side: int, linears: int
) -> list[dict[str, Any]]:
    """Run ``ranks``' loads at once, each in a fresh interpreter (as a node's ranks run),
    and return their figures."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.cold_pages",
                "--child",
                str(ckpt),
                str(warm),
                layout,
                str(rank),
                str(world),
                str(side),
                str(linears),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "GLOG_minloglevel": "2"},
        )
        for rank in ranks
    ]
    out = []
    for rank, proc in zip(ranks, procs, strict=True):
        stdout, stderr = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"rank {rank} failed:\n{stderr[-3000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4, help="ranks in the world")
    parser.add_argument("--nodes", type=int, default=2, help="nodes the ranks are spread over")
    parser.add_argument("--linears", type=int, default=8, help="block-FP8 linears (4 a file)")
    parser.add_argument("--side", type=int, default=2048, help="side of each linear")
    parser.add_argument("--rounds", type=int, default=1, help="cold loads of the node per layout")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write the checkpoint (not a tmpfs)"
    )
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        ckpt, warm, layout, rank, world, side, linears = args.child
        figures = child(ckpt, warm, layout, int(rank), int(world), int(side), int(linears))
        print(json.dumps(figures))
        return 0
    if os.geteuid() != 0:
        print("bench.cold_pages: evicting the page cache needs root", file=sys.stderr)
        return 2
    from bench.checkpoints import BLOCK, write_fp8_block

    with tempfile.TemporaryDirectory(prefix="flexq-cold-", dir=args.dir) as tmp:
        ckpt = write_fp8_block(Path(tmp) / "fp8", args.linears, side=args.side)
        warm = write_fp8_block(Path(tmp) / "warm", 4, side=512)
        size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
        per_node = args.ranks // args.nodes
        print(
            f"checkpoint: {args.linears} x {args.side}^2 block-FP8, {size / 2**20:.1f} MiB; "
            f"{args.ranks} ranks on {args.nodes} nodes, each node's load from a cold cache"
        )
        for layout, r, node in itertools.product(LAYOUTS, range(args.rounds), range(args.nodes)):
            ranks = list(range(node * per_node, (node + 1) * per_node))
            floor = node_floor(ckpt, args.side, BLOCK, layout, ranks, args.ranks)
            drop_caches()
            got = run_node(ckpt, warm, layout, ranks, args.ranks, args.side, args.linears)
            disk = sum(g["disk"] for g in got)
            own = [g["pages_read_bytes"] for g in got]
            print(
                f"{layout} round {r + 1} node {node} (ranks {ranks}): disk {disk / 2**20:.2f} MiB, "
                f"floor {floor / 2**20:.2f} MiB, disk / floor {disk / floor:.3f}, "
                f"disk / file {disk / size:.3f}; per rank pages_read_bytes "
                f"{[None if p is None else round(p / 2**20, 2) for p in own]} MiB, "
                f"seconds {[round(g['seconds'], 3) for g in got]}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
