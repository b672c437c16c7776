"""Fused targets held in shards: AOA's fuse split per rank, or a clear refusal.

One process holding one rank's box of a tensor-parallel fused target is what each
rank of a real launch does (tests/paddleformers/test_parallel.py runs the real
2-rank loads): ``gate, up -> gate_up, fused_ffn`` must give the box its own chunk
of gate followed by its own chunk of up (Paddle's layout when AOA sees every
rank's boxes), never its slice of the plain concatenation [gate | up].
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq
from flexq.errors import TargetError

L0 = "model.layers.0"
FFN = [
    f"{L0}.mlp.gate_proj.weight^T -> tg",
    f"{L0}.mlp.up_proj.weight^T -> tu",
    "tg, tu -> gate_up, fused_ffn",
]
#: gate and up are [96 out, 64 in]: the fused target is [64, 192].
WHOLE = (64, 192)


def gate_up_box(width: int, start: int) -> tuple[dict[str, Any], paddle.Tensor]:
    t = paddle.full([WHOLE[0], width], 7.0)
    return {"gate_up": ShardedWeight("gate_up", t, (WHOLE[0], width), WHOLE, (0, start))}, t


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint"])
@pytest.mark.parametrize(("ranks", "rank"), [(2, 0), (2, 1), (4, 2)])
def test_a_fused_ffn_shard_holds_its_chunk_of_gate_then_its_chunk_of_up(
    int8row_ckpt: Path, engine: str, ranks: int, rank: int
) -> None:
    ct = flexq.compose(int8row_ckpt)
    gate = ct.load(f"{L0}.mlp.gate_proj.weight", "float32").T
    up = ct.load(f"{L0}.mlp.up_proj.weight", "float32").T
    width = WHOLE[1] // ranks
    sd, t = gate_up_box(width, rank * width)
    flexq.load_state_dict(
        sd,
        int8row_ckpt,
        aoa_config={"aoa_statements": FFN},
        engine=engine,  # type: ignore[arg-type]
    )
    part = gate.shape[1] // ranks
    chunk = slice(rank * part, (rank + 1) * part)
    expected = np.concatenate([gate[:, chunk], up[:, chunk]], axis=1)
    np.testing.assert_array_equal(t.numpy(), expected)
    plain = np.concatenate([gate, up], axis=1)[:, rank * width : (rank + 1) * width]
    assert not np.array_equal(t.numpy(), plain)


def test_a_fuse_over_a_box_that_does_not_tile_its_tensor_is_refused(int8row_ckpt: Path) -> None:
    """Boxes of 80 of 192 columns: the other ranks' boxes are unknown, so the per-rank
    layout is too; a plain concatenation would load wrong values without a word."""
    sd, t = gate_up_box(80, 80)
    with pytest.raises(TargetError, match=r"target 'gate_up': AOA statement .*does not tile"):
        flexq.load_state_dict(sd, int8row_ckpt, aoa_config={"aoa_statements": FFN})
    np.testing.assert_array_equal(t.numpy(), np.full((64, 80), 7.0, np.float32))


def test_a_fuse_whose_parts_do_not_split_into_the_shards_is_refused(int8row_ckpt: Path) -> None:
    """64 shards of 3 columns: gate's 96 columns do not split into 64 equal chunks."""
    sd, t = gate_up_box(3, 6)
    with pytest.raises(TargetError, match="AOA statements do not apply.*not divisible"):
        flexq.load_state_dict(sd, int8row_ckpt, aoa_config={"aoa_statements": FFN})
    np.testing.assert_array_equal(t.numpy(), np.full((64, 3), 7.0, np.float32))


def test_an_unevenly_sharded_target_without_a_fuse_still_loads(int8row_ckpt: Path) -> None:
    """Only fuses depend on the other ranks' boxes: a plain slice of any box is exact."""
    ct = flexq.compose(int8row_ckpt)
    down = ct.load(f"{L0}.mlp.down_proj.weight", "float32")  # [64, 96]
    t = paddle.zeros([64, 40])
    flexq.load_state_dict(
        {"down": ShardedWeight("down", t, (64, 40), (64, 96), (0, 50))},
        int8row_ckpt,
        aoa_config={"aoa_statements": [f"{L0}.mlp.down_proj.weight -> down"]},
    )
    np.testing.assert_array_equal(t.numpy(), down[:, 50:90])
