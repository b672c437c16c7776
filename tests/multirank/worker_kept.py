"""One rank of the 2-rank kept loads (started by paddle.distributed.launch from test_kept.py).

Usage: worker_kept.py FP8_CKPT MXFP4_CKPT OUT. FP8_CKPT holds ``fp8.weight`` [128, 128] in
32x32 blocks and ``odd.weight`` [128, 80] (whose Shard(1) halves cut a block); MXFP4_CKPT
holds gpt-oss experts ``experts.gate_up_proj`` (kept [2, 64, 32], scales [2, 64, 2]).
Each case is one load on this rank: its Shard(0) or Shard(1) box as ShardedWeight parts
or as dist tensors. Writes each case's values bytes, scales and bytes read (or the error
message) to OUT/rank<N>.npz.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq

FP8, ODD, EXPERTS = "fp8.weight", "odd.weight", "experts.gate_up_proj"


def sharded(
    key: str, values: tuple[int, ...], grid: tuple[int, ...], block: tuple[int, ...], dim: int
) -> tuple[flexq.QuantizedTarget, Any, Any, str]:
    """This rank's Shard(dim) box of values and scales, as ShardedWeight parts."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    local = list(values)
    local[dim] //= ranks
    offset = [0] * len(values)
    offset[dim] = rank * local[dim]
    slocal = list(grid)
    slocal[dim] = -(-local[dim] // block[dim])
    soffset = [0] * len(grid)
    soffset[dim] = offset[dim] // block[dim]
    dtype = "uint8" if key == EXPERTS else paddle.float8_e4m3fn
    v = paddle.zeros(local, "float32").astype(dtype)
    s = paddle.zeros(slocal, "uint8" if key == EXPERTS else "float32")
    qt = flexq.QuantizedTarget(
        ShardedWeight(key, v, tuple(local), values, tuple(offset)),
        ShardedWeight(key + ".s", s, tuple(slocal), grid, tuple(soffset)),
    )
    return qt, v, s, "sharded"


def dist_parts(
    key: str, values: tuple[int, ...], grid: tuple[int, ...], dim: int
) -> tuple[flexq.QuantizedTarget, Any, Any, str]:
    """Dist tensors placed Shard(dim) on a 2-rank mesh, built from this rank's local
    tensors (3.3.1's shard_tensor cannot slice float8 on CPU)."""
    from paddle.distributed.auto_parallel.api import dtensor_from_local

    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    local, slocal = list(values), list(grid)
    local[dim] //= 2
    slocal[dim] //= 2
    dtype = "uint8" if key == EXPERTS else paddle.float8_e4m3fn
    v = dtensor_from_local(paddle.zeros(local, "float32").astype(dtype), mesh, [dist.Shard(dim)])
    sdtype = "uint8" if key == EXPERTS else "float32"
    s = dtensor_from_local(paddle.zeros(slocal, sdtype), mesh, [dist.Shard(dim)])
    return flexq.QuantizedTarget(v, s), v._local_value(), s._local_value(), "dist"


def main(fp8: str, mx: str, out: str) -> None:
    dist.init_parallel_env()
    results: dict[str, Any] = {}
    Make = Callable[[], tuple[flexq.QuantizedTarget, Any, Any, str]]
    cases: dict[str, tuple[str, str, Make]] = {
        "fp8.s0.sharded": (fp8, FP8, lambda: sharded(FP8, (128, 128), (4, 4), (32, 32), 0)),
        "fp8.s1.sharded": (fp8, FP8, lambda: sharded(FP8, (128, 128), (4, 4), (32, 32), 1)),
        "fp8.s0.dist": (fp8, FP8, lambda: dist_parts(FP8, (128, 128), (4, 4), 0)),
        "fp8.s1.dist": (fp8, FP8, lambda: dist_parts(FP8, (128, 128), (4, 4), 1)),
        "mx.s0.dist": (mx, EXPERTS, lambda: dist_parts(EXPERTS, (2, 64, 32), (2, 64, 2), 0)),
        "mx.s1.sharded": (
            mx,
            EXPERTS,
            lambda: sharded(EXPERTS, (2, 64, 32), (2, 64, 2), (1, 1, 16), 1),
        ),
        "odd.s1.sharded": (fp8, ODD, lambda: sharded(ODD, (128, 80), (4, 3), (32, 32), 1)),
    }
    for name, (ckpt, key, make) in cases.items():
        qt, v, s, _ = make()
        try:
            report = flexq.load_state_dict({key: qt}, ckpt, engine="direct")
        except flexq.FlexqError as exc:
            results[name + ".error"] = np.array(str(exc))
            results[name + ".untouched"] = np.array(
                bool((v.view(paddle.uint8).numpy() == 0).all() and (s.numpy() == 0).all())
            )
            continue
        results[name + ".values"] = (
            v.view(paddle.uint8).numpy() if v.dtype != paddle.uint8 else v.numpy()
        )
        results[name + ".scales"] = s.numpy()
        results[name + ".bytes_read"] = np.array(report.bytes_read)
    np.savez(f"{out}/rank{dist.get_rank()}.npz", **results)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
