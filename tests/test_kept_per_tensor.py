"""A per-tensor FP8 scale has no block to cut: a kept shard of a per-tensor weight takes
any rows or columns (what a tensor-parallel rank of a small per-tensor layer holds),
with the one scale as it is stored."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import paddle
import pytest
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq
from flexq.io.checkpoint import Checkpoint
from flexq_fp8 import save_fp8_checkpoint

KEY = "w"
SHAPE = (48, 40)


@pytest.fixture(scope="module")
def per_tensor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    w = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    return save_fp8_checkpoint(tmp_path_factory.mktemp("pt") / "fp8", {KEY: w}, layout="tensor")


@pytest.mark.parametrize(
    ("offset", "local"), [((16, 0), (16, 40)), ((0, 20), (48, 20))], ids=["rows", "columns"]
)
def test_a_shard_of_a_per_tensor_weight_gets_its_bytes_and_the_scale(
    per_tensor: Path, offset: tuple[int, int], local: tuple[int, int]
) -> None:
    values = paddle.zeros(list(local), "float32").astype(paddle.float8_e4m3fn)
    scale = paddle.zeros([1])
    qt = flexq.QuantizedTarget(
        ShardedWeight(KEY, values, local, SHAPE, offset),
        ShardedWeight("s", scale, (1,), (1,), (0,)),
    )
    flexq.load_state_dict({KEY: qt}, per_tensor)
    with Checkpoint(per_tensor) as ckpt:
        whole, stored = ckpt.read(KEY), ckpt.read(KEY + "_scale")
    box = whole[offset[0] : offset[0] + local[0], offset[1] : offset[1] + local[1]]
    assert values.view(paddle.uint8).numpy().tobytes() == box.tobytes()
    assert scale.numpy().tobytes() == stored.reshape(1).astype(np.float32).tobytes()
