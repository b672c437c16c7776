"""One rank of the MoE multi-rank loads (started by paddle.distributed.launch from test_multirank.py).

Usage: ``worker_moe.py CKPT PARTIAL OUT``. CKPT is this node's copy of the
checkpoint of :mod:`tests.multirank.moe`; PARTIAL is this node's copy for the
files-visible-to-some-ranks case (``-`` to skip it). For both engines (direct,
flexcheckpoint) it loads every layout of :data:`moe.LAYOUTS` the world allows,
built from Paddle placements (TP as Shard(0)/Shard(1) dist tensors, EP as plain
tensors of the rank's experts, TP x EP on a 2x2 mesh with experts on per-group
sub-meshes, DP as Replicate), then the tuple-keyed multi-shard targets in
float32 and bfloat16, then the EP layout from PARTIAL. Writes OUT/rank<N>.npz
(the local values, as float32) and OUT/rank<N>.json (per load: engine, case,
bytes read, planned bytes, pieces, or the error, and which arrays it wrote).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq

sys.path.insert(0, str(Path(__file__).parents[2]))  # the repository root, for tests.*

from tests.multirank import moe
from tests.multirank.worker_load import cuda_shim

ENGINES = ("direct", "flexcheckpoint")


def _zeros(shape: tuple[int, ...], dtype: str) -> paddle.Tensor:
    return paddle.zeros(list(shape), dtype=dtype)


def layout_targets(layout: str, world: int, rank: int) -> dict[Any, Any]:
    """The targets of ``layout`` on this rank, from Paddle placements (see the module)."""
    line = dist.ProcessMesh(list(range(world)), dim_names=["x"])
    split = {k: dist.Shard(1 if moe.is_row_parallel(k) else 0) for k in moe.FP8}
    dense = [moe.Q_PROJ, moe.O_PROJ, *moe.SHARED_KEYS.values()]
    state: dict[Any, Any] = {
        k: dist.shard_tensor(_zeros(s, "float32"), line, [dist.Replicate()])
        for k, s in moe.BF16.items()
    }
    if layout == "tp":
        for k in dense:
            state[k] = dist.shard_tensor(_zeros(moe.FP8[k], "float32"), line, [split[k]])
    elif layout == "ep":
        per = moe.EXPERTS // world
        for e in range(rank * per, (rank + 1) * per):
            state.update({k: _zeros(moe.FP8[k], "float32") for k in moe.expert_keys(e).values()})
    elif layout == "tpxep":
        grid = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["ep", "tp"])
        for k, s in moe.BF16.items():
            state[k] = dist.shard_tensor(_zeros(s, "float32"), grid, [dist.Replicate()] * 2)
        for k in dense:
            state[k] = dist.shard_tensor(
                _zeros(moe.FP8[k], "float32"), grid, [dist.Replicate(), split[k]]
            )
        for e in range(moe.EXPERTS):
            group = dist.ProcessMesh([2 * (e // 2), 2 * (e // 2) + 1], dim_names=["tp"])
            for k in moe.expert_keys(e).values():
                state[k] = dist.shard_tensor(_zeros(moe.FP8[k], "float32"), group, [split[k]])
    elif layout == "dp":
        for k, s in moe.FP8.items():
            state[k] = dist.shard_tensor(_zeros(s, "float32"), line, [dist.Replicate()])
    return state


def multishard_targets(world: int, rank: int, dtype: str) -> dict[Any, Any]:
    """FlexCheckpoint's multi-shard form: ``(name, global_offset)`` -> ShardedWeight."""
    return {
        (key, offset): ShardedWeight(key, _zeros(shape, dtype), shape, moe.FP8[key], offset)
        for key, shards in moe.multishard_boxes(world, rank).items()
        for offset, shape in shards
    }


def local_values(state: dict[Any, Any]) -> dict[str, np.ndarray]:
    """Name (``key`` or ``key@offset``) -> this rank's local value as float32, for every
    target this rank holds."""
    out = {}
    for name, value in state.items():
        if isinstance(value, ShardedWeight):
            local = value.local_tensor
            label = f"{name[0]}@{','.join(map(str, name[1]))}" if isinstance(name, tuple) else name
        else:
            local = value._local_value() if value.is_dist() else value
            label = name
        if local._is_initialized() and local.numel() > 0:
            out[label] = local.astype("float32").numpy()
        # else: a dist tensor on a mesh this rank is not part of: nothing to hold
    return out


class Recorder:
    """Collects every load's figures and values for the test."""

    def __init__(self) -> None:
        self.loads: list[dict[str, Any]] = []
        self.arrays: dict[str, Any] = {}

    def load(self, engine: str, case: str, state: dict[Any, Any], path: str) -> None:
        record: dict[str, Any] = {"engine": engine, "case": case}
        try:
            report = flexq.load_state_dict(state, path, engine=engine)  # type: ignore[arg-type]
        except flexq.FlexqError as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"
        else:
            record.update(
                bytes_read=report.bytes_read, planned=report.planned_bytes, pieces=report.pieces
            )
        names = {}
        for label, value in local_values(state).items():
            names[label] = name = f"a{len(self.arrays)}"
            self.arrays[name] = value
        record["arrays"] = names
        self.loads.append(record)


def main(ckpt: str, partial: str, out: str) -> None:
    cuda_shim()  # TEST-ONLY: lets 3.3.1's reshard communicators run on a CPU-only build
    dist.init_parallel_env()
    world, rank = dist.get_world_size(), dist.get_rank()
    rec = Recorder()
    for engine in ENGINES:
        for layout in moe.LAYOUTS:
            if layout != "tpxep" or world == 4:
                rec.load(engine, layout, layout_targets(layout, world, rank), ckpt)
        for dtype in ("float32", "bfloat16"):
            rec.load(engine, f"multishard-{dtype}", multishard_targets(world, rank, dtype), ckpt)
        if partial != "-":
            rec.load(engine, "partial-ep", layout_targets("ep", world, rank), partial)
    np.savez(Path(out, f"rank{rank}.npz"), **rec.arrays)
    Path(out, f"rank{rank}.json").write_text(json.dumps({"world": world, "loads": rec.loads}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
