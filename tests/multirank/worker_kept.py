"""One rank of the 2-rank kept loads (started by paddle.distributed.launch from test_kept_ranks.py).

Usage: worker_kept.py CASES_JSON OUT. CASES_JSON (written by the test) lists the
checkpoints (each with its ordinary targets: a norm, and for FP8 a dequantized weight)
and the kept cases: a key, its kept values and scale-grid shapes, the block in kept
units, the parts' dtypes, the split dimension and how the parts are built (``sharded``:
ShardedWeight parts; ``dist``: dist tensors placed Shard(dim); ``skew``: ShardedWeight
parts where rank 1's box starts half a block early, so only rank 1 cuts a block).

For every engine (direct; flexcheckpoint and native with the test-only reshard shim,
native through the upstream stand-in on a Paddle without ``load_transform``) and every
checkpoint, this rank loads the ordinary targets alone (their bytes read), then each
kept case together with fresh ordinary targets in one call, and writes to
OUT/rank<N>.npz each case's kept values bytes, scales, global scale, ordinary values and
bytes read, or its error message, whether anything was read and whether every target
stayed untouched.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
from paddle.distributed.auto_parallel.api import dtensor_from_local
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq
from flexq.io.checkpoint import Checkpoint

sys.path.insert(0, str(Path(__file__).parents[2]))  # the repository root, for tests.*

from tests.multirank.worker_load import cuda_shim
from tests.native.conftest import install

ENGINES = ("direct", "flexcheckpoint", "native")
READS: list[str] = []


def count_reads() -> None:
    """Record every tensor read through Checkpoint.read (a refusal must come before any)."""
    real = Checkpoint.read

    def counted(self: Checkpoint, key: str, *args: Any, **kwargs: Any) -> np.ndarray:
        READS.append(key)
        return real(self, key, *args, **kwargs)

    Checkpoint.read = counted  # type: ignore[method-assign]


def zeros(shape: list[int], dtype: str) -> Any:
    if dtype == "float8_e4m3fn":
        return paddle.zeros(shape, "float32").astype(paddle.float8_e4m3fn)
    return paddle.zeros(shape, dtype)


def as_bytes(t: Any) -> np.ndarray:
    out: np.ndarray = t.view(paddle.uint8).numpy() if t.dtype != paddle.uint8 else t.numpy()
    return out


def box(case: dict[str, Any], shape: list[int], block: list[int]) -> tuple[list[int], list[int]]:
    """This rank's offset and extent of ``shape`` split in two along the case's dim."""
    rank, dim = dist.get_rank(), case["dim"]
    local, offset = list(shape), [0] * len(shape)
    local[dim] //= 2
    offset[dim] = rank * local[dim]
    if case["parts"] == "skew" and rank == 1:
        offset[dim] -= block[dim] // 2  # starts half a block early: only this rank cuts one
    return offset, local


def kept_target(case: dict[str, Any]) -> tuple[flexq.QuantizedTarget, list[Any]]:
    """The case's QuantizedTarget on this rank and its local tensors (values, scales[, g])."""
    shape, grid, block = case["shape"], case["grid"], case["block"]
    offset, local = box(case, shape, block)
    soffset = [o // b for o, b in zip(offset, block, strict=True)]
    slocal = [-(-(o + n) // b) - o // b for o, n, b in zip(offset, local, block, strict=True)]
    v, s = zeros(local, case["values_dtype"]), zeros(slocal, case["scales_dtype"])
    glob = paddle.zeros([1], "float32") if case["global"] else None
    locals_ = [v, s] if glob is None else [v, s, glob]
    if case["parts"] == "dist":
        mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
        place = [dist.Shard(case["dim"])]
        dv, ds = dtensor_from_local(v, mesh, place), dtensor_from_local(s, mesh, place)
        return flexq.QuantizedTarget(dv, ds, glob), [dv._local_value(), ds._local_value(), glob]
    key = case["key"]
    return (
        flexq.QuantizedTarget(
            ShardedWeight(key, v, tuple(local), tuple(shape), tuple(offset)),
            ShardedWeight(key + ".s", s, tuple(slocal), tuple(grid), tuple(soffset)),
            glob,
        ),
        locals_,
    )


def ordinary(ckpt: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The checkpoint's ordinary (dequantized) targets as Shard(0) dist tensors, and their
    local tensors."""
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    targets, local = {}, {}
    for key, shape in ckpt["ordinary"].items():
        t = dist.shard_tensor(paddle.zeros(shape, "float32"), mesh, [dist.Shard(0)])
        targets[key], local[key] = t, t._local_value()
    return targets, local


def run(engine: str, ckpts: dict[str, Any], cases: dict[str, Any]) -> dict[str, Any]:
    got: dict[str, Any] = {}
    for name, ckpt in ckpts.items():
        targets, _ = ordinary(ckpt)
        report = flexq.load_state_dict(targets, ckpt["path"], engine=engine)  # type: ignore[arg-type]
        got[f"{engine}.{name}.alone.bytes_read"] = np.array(report.bytes_read)
    for name, case in cases.items():
        ckpt = ckpts[case["ckpt"]]
        qt, parts = kept_target(case)
        targets, local = ordinary(ckpt)
        at = f"{engine}.{name}"
        del READS[:]
        try:
            report = flexq.load_state_dict(
                {case["key"]: qt, **targets},
                ckpt["path"],
                engine=engine,  # type: ignore[arg-type]
            )
        except flexq.FlexqError as exc:
            got[at + ".error"] = np.array(f"{type(exc).__name__}: {exc}")
            got[at + ".read"] = np.array(any(k in READS for k in case["sources"]))
            every = [*parts, *local.values()]
            got[at + ".untouched"] = np.array(
                all((as_bytes(p) == 0).all() for p in every if p is not None)
            )
            continue
        got[at + ".engine"] = np.array(report.engine)
        got[at + ".values"] = as_bytes(parts[0])
        got[at + ".scales"] = (
            parts[1].numpy() if parts[1].dtype != paddle.float8_e4m3fn else (as_bytes(parts[1]))
        )
        if case["global"]:
            got[at + ".global"] = parts[2].numpy()
        for key, t in local.items():
            got[f"{at}.{key}"] = t.numpy()
        got[at + ".bytes_read"] = np.array(report.bytes_read)
    return got


def main(cases_json: str, out: str) -> None:
    cuda_shim()  # TEST-ONLY: lets 3.3.1's reshard communicators run on a CPU-only build
    install()  # Paddle's load_state_dict with load_transform= (the stand-in on 3.3.1)
    count_reads()
    dist.init_parallel_env()
    spec = json.loads(Path(cases_json).read_text())
    results: dict[str, Any] = {}
    for engine in ENGINES:
        results.update(run(engine, spec["checkpoints"], spec["cases"]))
    np.savez(f"{out}/rank{dist.get_rank()}.npz", **results)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
