"""One rank of a 2-rank kept FP8 load (started by paddle.distributed.launch from test_kept.py).

Usage: worker_kept.py CKPT OUT KEY ROWS COLS BLOCK. Loads this rank's Shard(0) box of
KEY (ROWS x COLS, block-FP8 with BLOCK x BLOCK blocks) as a kept target (ShardedWeight
parts) and writes the values' bytes, the scales and the bytes read to OUT/rank<N>.npz.
"""

from __future__ import annotations

import sys

import numpy as np
import paddle
import paddle.distributed as dist
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq
from flexq.formatkit import ceil_div


def main(ckpt: str, out: str, key: str, rows: int, cols: int, block: int) -> None:
    dist.init_parallel_env()
    rank, ranks = dist.get_rank(), dist.get_world_size()
    local = rows // ranks
    grid = (ceil_div(rows, block), ceil_div(cols, block))
    scale_local = (local // block, grid[1])
    values = paddle.zeros([local, cols], "float32").astype(paddle.float8_e4m3fn)
    scales = paddle.zeros(list(scale_local), "float32")
    target = flexq.QuantizedTarget(
        ShardedWeight(key, values, (local, cols), (rows, cols), (rank * local, 0)),
        ShardedWeight(key + "_scale_inv", scales, scale_local, grid, (rank * scale_local[0], 0)),
    )
    report = flexq.load_state_dict({key: target}, ckpt, engine="direct")
    np.savez(
        f"{out}/rank{rank}.npz",
        values=values.view(paddle.uint8).numpy(),
        scales=scales.numpy(),
        bytes_read=np.array(report.bytes_read),
    )


if __name__ == "__main__":
    main(
        sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    )
