"""AOA statements on kept targets (issue 26): renames, fused qkv (head-group interleave) and
gate_up, FP8-block ``^T`` move values and scales together, with the same semantics as
for dequantized targets (the oracle: the dequantized load of the same statements); what
cannot stay exact is refused naming the statement, before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq
from flexq.io.checkpoint import Checkpoint
from flexq_fp8 import save_fp8_checkpoint
from flexq_mxfp4.encode import save_mxfp4_checkpoint

B = 32  # the checkpoint's block: 32 x 32
SHAPES = {"q": (64, 64), "k": (32, 64), "v": (32, 64), "gate": (64, 64), "up": (64, 64)}
SHAPES |= {"odd": (80, 64)}  # a partial last block of rows (80 = 2*32 + 16)
QKV = "q, k, v -> qkv, fused_qkv, num_heads=2, num_key_value_groups=1, axis=0"


@pytest.fixture(scope="module")
def fp8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(21)
    weights = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    return save_fp8_checkpoint(
        tmp_path_factory.mktemp("aoa") / "fp8", weights, layout="block", block_size=(B, B)
    )


def kept(shape: tuple[int, int], fill: float = 0.0) -> flexq.QuantizedTarget:
    values = paddle.full(list(shape), fill).astype(paddle.float8_e4m3fn)
    return flexq.QuantizedTarget(values, paddle.full([-(-shape[0] // B), -(-shape[1] // B)], fill))


def dequantized(qt: flexq.QuantizedTarget) -> np.ndarray:
    """The kept FP8 block form dequantized (numpy reference): values * scale per block."""
    values = qt.values.astype("float32").numpy()
    scale = np.repeat(np.repeat(qt.scales.numpy(), B, 0), B, 1)[
        : values.shape[0], : values.shape[1]
    ]
    out: np.ndarray = values * scale
    return out


def load_both(path: Path, statements: list[str], key: str, shape: tuple[int, int]) -> Any:
    """The kept target and the dequantized target loaded with the same statements."""
    qt = kept(shape)
    flexq.load_state_dict({key: qt}, path, aoa_config={"aoa_statements": statements})
    plain = paddle.zeros(list(shape))
    flexq.load_state_dict({key: plain}, path, aoa_config={"aoa_statements": statements})
    return qt, plain.numpy()


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, np.float32).view(np.uint32)


@pytest.mark.parametrize(
    ("statements", "key", "shape"),
    [
        (["q -> attn.q"], "attn.q", (64, 64)),
        ([QKV], "qkv", (128, 64)),
        (["gate, up -> gate_up, fused_ffn, axis=0"], "gate_up", (128, 64)),
        (["gate^T -> gate_t"], "gate_t", (64, 64)),
    ],
    ids=["rename", "fused_qkv", "fused_ffn", "transpose"],
)
def test_a_statement_moves_values_and_scales_as_it_moves_the_dequantized_tensor(
    fp8: Path, statements: list[str], key: str, shape: tuple[int, int]
) -> None:
    qt, plain = load_both(fp8, statements, key, shape)
    assert np.array_equal(bits(dequantized(qt)), bits(plain))


def test_a_fused_qkv_holds_the_checkpoints_bytes_in_head_group_order(fp8: Path) -> None:
    qt, _ = load_both(fp8, [QKV], "qkv", (128, 64))
    with Checkpoint(fp8) as ckpt:
        q, k, v = (ckpt.read(n) for n in "qkv")
        sq, sk, sv = (ckpt.read(n + "_scale_inv") for n in "qkv")
    got = qt.values.view(paddle.uint8).numpy()
    assert np.array_equal(got, np.concatenate([q, k, v]))  # one kv group: q heads, k, v
    assert np.array_equal(qt.scales.numpy(), np.concatenate([sq, sk, sv]))


def test_transposing_an_fp8_block_weight_transposes_values_and_the_scale_grid(fp8: Path) -> None:
    values = paddle.zeros([64, 80], "float32").astype(paddle.float8_e4m3fn)
    qt = flexq.QuantizedTarget(values, paddle.zeros([2, 3]))
    with Checkpoint(fp8) as ckpt:
        w, s = ckpt.read("odd"), ckpt.read("odd_scale_inv")
    flexq.load_state_dict({"odd_t": qt}, fp8, aoa_config={"aoa_statements": ["odd^T -> odd_t"]})
    assert np.array_equal(values.view(paddle.uint8).numpy(), w.T)
    assert np.array_equal(qt.scales.numpy(), s.T)


def test_heads_that_share_a_block_are_checked_together(fp8: Path) -> None:
    """fused_qkv moves one box a head: q's four 16-row heads share its 32-row blocks two
    a block, so they are joined and stay kept; the result is the dequantized fuse's."""
    statements = ["q, k, v -> qkv, fused_qkv, num_heads=4, num_key_value_groups=1, axis=0"]
    qt, plain = load_both(fp8, statements, "qkv", (128, 64))
    assert np.array_equal(bits(dequantized(qt)), bits(plain))
    with Checkpoint(fp8) as ckpt:
        q, k, v = (ckpt.read(n) for n in "qkv")
    assert np.array_equal(qt.values.view(paddle.uint8).numpy(), np.concatenate([q, k, v]))


def test_a_fused_ffn_shard_gets_its_chunk_of_gate_then_up_reading_only_those_blocks(
    fp8: Path,
) -> None:
    statements = ["gate, up -> gate_up, fused_ffn, axis=0"]
    values = paddle.zeros([64, 64], "float32").astype(paddle.float8_e4m3fn)
    scales = paddle.zeros([2, 2])
    qt = flexq.QuantizedTarget(
        ShardedWeight("gate_up", values, (64, 64), (128, 64), (64, 0)),
        ShardedWeight("gate_up.s", scales, (2, 2), (4, 2), (2, 0)),
    )
    report = flexq.load_state_dict({"gate_up": qt}, fp8, aoa_config={"aoa_statements": statements})
    with Checkpoint(fp8) as ckpt:
        gate, up = ckpt.read("gate"), ckpt.read("up")
    # rank 1 of 2: gate's second half of rows, then up's (Paddle's per-rank fused layout)
    assert np.array_equal(values.view(paddle.uint8).numpy(), np.concatenate([gate[32:], up[32:]]))
    assert report.bytes_read == 64 * 64 + 4 * 4


@pytest.mark.parametrize(
    ("statements", "key", "shape", "message"),
    [
        (["gate -> g, dtype='bfloat16'"], "g", (64, 64), r"casts; a kept form is never cast"),
        (
            ["odd, gate -> og, axis=0"],
            "og",
            (144, 64),
            r"'odd, gate -> og, axis=0' moves 'odd' box .* cuts",
        ),
    ],
    ids=["cast", "cuts-a-block"],
)
def test_a_statement_that_cannot_stay_exact_is_refused_naming_it(
    fp8: Path, statements: list[str], key: str, shape: tuple[int, int], message: str
) -> None:
    qt = kept(shape, 3.0)
    with pytest.raises(flexq.TargetError, match=message):
        flexq.load_state_dict({key: qt}, fp8, aoa_config={"aoa_statements": statements})
    assert (qt.values.astype("float32").numpy() == 3.0).all()


def test_transposing_packed_fp4_is_refused_naming_the_statement(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    path = save_mxfp4_checkpoint(
        tmp_path / "mx", {"w.weight": rng.standard_normal((64, 64)).astype(np.float32)}
    )
    qt = flexq.QuantizedTarget(paddle.zeros([64, 32], "uint8"), paddle.zeros([64, 2], "uint8"))
    with pytest.raises(flexq.TargetError, match=r"'w.weight\^T -> wt'.*transposes a mxfp4"):
        flexq.load_state_dict({"wt": qt}, path, aoa_config={"aoa_statements": ["w.weight^T -> wt"]})


def test_gpt_oss_experts_keyed_by_their_name_load_beside_statements_for_other_tensors(
    tmp_path: Path,
) -> None:
    """What a PaddleFormers load does: statements for the model, the experts kept as stored."""
    rng = np.random.default_rng(6)
    key = "model.layers.0.mlp.experts.gate_up_proj"
    path = save_mxfp4_checkpoint(
        tmp_path / "oss",
        {key: rng.standard_normal((2, 64, 48)).astype(np.float32)},
        layout="gpt-oss",
        others={"model.norm.weight": flexq.RawTensor("F32", np.ones(64, np.float32))},
    )
    values, scales = paddle.zeros([2, 24, 32], "uint8"), paddle.zeros([2, 24, 2], "uint8")
    qt = flexq.QuantizedTarget(
        ShardedWeight(key, values, (2, 24, 32), (2, 48, 32), (0, 24, 0)),
        ShardedWeight(key + ".s", scales, (2, 24, 2), (2, 48, 2), (0, 24, 0)),
    )
    norm = paddle.zeros([64])
    statements = ["model.norm.weight -> norm"]
    flexq.load_state_dict({key: qt, "norm": norm}, path, aoa_config={"aoa_statements": statements})
    with Checkpoint(path) as ckpt:
        blocks, stored_scales = ckpt.read(key + "_blocks"), ckpt.read(key + "_scales")
    assert np.array_equal(values.numpy(), blocks.reshape(2, 48, 32)[:, 24:])
    assert np.array_equal(scales.numpy(), stored_scales[:, 24:])
    assert (norm.numpy() == 1.0).all()
    renamed = flexq.QuantizedTarget(
        paddle.zeros([2, 48, 32], "uint8"), paddle.zeros([2, 48, 2], "uint8")
    )
    with pytest.raises(
        flexq.TargetError, match=r"gpt-oss experts are kept as stored .* only under"
    ):
        flexq.load_state_dict(
            {"experts": renamed}, path, aoa_config={"aoa_statements": [f"{key} -> experts"]}
        )


def test_a_plan_takes_the_statements_on_the_way_to_its_targets_scratch_names_included() -> None:
    """Paddle's chain resolver loops on a fuse into another tensor of its own name when
    that tensor is not planned (Phi-3's qkv_proj): each plan takes only its own chain."""
    from flexq.load.kept_chains import leading_to

    qkv = "model.layers.$LAYER_ID.self_attn.qkv_proj.weight"
    statements = [
        "model.norm.weight -> model.norm.weight",
        f"{qkv} -> {qkv}_kept_tmp",
        f"{qkv}_kept_tmp -> {qkv}, fused_qkv_old, num_heads=4, num_key_value_groups=2, axis=0",
        "model.layers.$LAYER_ID.mlp.down_proj.weight^T -> model.layers.$LAYER_ID.mlp.down_proj.weight",
    ]
    assert leading_to(statements, ["model.layers.1.self_attn.qkv_proj.weight"]) == statements[1:3]
    assert leading_to(statements, ["model.layers.0.mlp.down_proj.weight"]) == statements[3:]
    assert leading_to(statements, ["lm_head.weight"]) == []
