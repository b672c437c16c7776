"""One rank of a 2-rank native-path load (started by paddle.distributed.launch from test_native.py).

Usage: worker_native.py CKPT OUT FORMAT. Loads every linear weight into
ShardedWeight ``Shard(0)`` targets three ways: ``engine="direct"``, the composed
transform handed to Paddle's ``load_state_dict`` itself (``raw``), and
``engine="native"`` (renamed, and transposed by AOA), then FlexCheckpoint's
tuple-keyed multi-shard targets (two row quarters per rank) through
``engine="native"``; writes this rank's local values to OUT/rank<N>.npz.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq

sys.path.insert(0, str(Path(__file__).parents[2]))  # the repository root, for tests.*

from tests.multirank.worker_load import cuda_shim, register_example
from tests.native.conftest import install, symlink_copy


def shard0(key: str, shape: tuple[int, ...]) -> ShardedWeight:
    rows = shape[0] // dist.get_world_size()
    local = paddle.zeros([rows, *shape[1:]], dtype="float32")
    offset = (dist.get_rank() * rows, *(0 for _ in shape[1:]))
    return ShardedWeight(key, local, (rows, *shape[1:]), shape, offset)


def main(ckpt: str, out: str, name: str) -> None:
    cuda_shim()  # TEST-ONLY: lets 3.3.1's reshard communicators run on a CPU-only build
    if name == "int8row":
        register_example()
    loader = install()
    dist.init_parallel_env()
    ct = flexq.compose(ckpt, [name])
    linears = sorted(k for k, e in ct.entries.items() if not e.is_passthrough)
    shapes = {k: ct.entries[k].shape for k in linears}
    arrays: dict[str, Any] = {}

    sd = {f"w{i}": shard0(f"w{i}", shapes[k]) for i, k in enumerate(linears)}
    renames = [f"{k} -> w{i}" for i, k in enumerate(linears)]
    flexq.load_state_dict(sd, ckpt, aoa_config={"aoa_statements": renames}, engine="direct")
    arrays.update({f"direct.{i}": sd[f"w{i}"].local_tensor.numpy() for i in range(len(linears))})

    raw = {k: shard0(k, shapes[k]) for k in linears}
    view = Path(out) / "view"  # one directory for both ranks, as a shared checkpoint is
    if dist.get_rank() == 0:
        symlink_copy(Path(ckpt), view)
    dist.barrier()
    loader(raw, str(view), safetensors=True, load_transform=ct)
    arrays.update({f"raw.{i}": raw[k].local_tensor.numpy() for i, k in enumerate(linears)})

    sd = {f"w{i}": shard0(f"w{i}", shapes[k]) for i, k in enumerate(linears)}
    sd.update({f"t{i}": shard0(f"t{i}", shapes[k][::-1]) for i, k in enumerate(linears)})
    statements = renames + [f"{k}^T -> t{i}" for i, k in enumerate(linears)]
    report = flexq.load_state_dict(
        sd, ckpt, aoa_config={"aoa_statements": statements}, engine="native"
    )
    assert report.engine == "native", report
    for i in range(len(linears)):
        arrays[f"native.{i}"] = sd[f"w{i}"].local_tensor.numpy()
        arrays[f"native.t{i}"] = sd[f"t{i}"].local_tensor.numpy()
    # FlexCheckpoint's multi-shard form: (name, global_offset) -> ShardedWeight, row
    # quarters rank and rank + 2 of every linear on this rank.
    multi: dict[Any, ShardedWeight] = {}
    for k in linears:
        rows = shapes[k][0] // 4
        for q in (dist.get_rank(), dist.get_rank() + 2):
            local = paddle.zeros([rows, *shapes[k][1:]], dtype="float32")
            offset = (q * rows, *(0 for _ in shapes[k][1:]))
            multi[(k, offset)] = ShardedWeight(k, local, (rows, *shapes[k][1:]), shapes[k], offset)
    report = flexq.load_state_dict(multi, ckpt, engine="native")
    assert report.engine == "native", report
    for (k, offset), target in multi.items():
        q = offset[0] // (shapes[k][0] // 4)
        arrays[f"multi.{linears.index(k)}.{q}"] = target.local_tensor.numpy()
    np.savez(f"{out}/rank{dist.get_rank()}.npz", **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:4])
