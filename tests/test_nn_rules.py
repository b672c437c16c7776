"""``flexq.nn.rules.for_kept``: a model's ``^T`` conversion rules dropped for kept weights only."""

from __future__ import annotations

import paddle
import pytest

import flexq
from flexq.errors import TargetError
from flexq.nn.rules import for_kept

Q = "model.layers.$LAYER_ID.self_attn.q_proj.weight"
RULES = {
    "aoa_statements": [
        f"{Q}^T -> {Q}",
        "model.embed_tokens.weight -> lm_head.weight",
    ]
}


def _kept() -> flexq.QuantizedTarget:
    return flexq.QuantizedTarget(paddle.zeros([2, 2]), paddle.zeros([1]))


def test_an_identity_statement_moving_only_kept_weights_is_dropped() -> None:
    state = {f"model.layers.{i}.self_attn.q_proj.weight": _kept() for i in range(2)}
    state["lm_head.weight"] = paddle.zeros([2, 2])
    got = for_kept(RULES, state)["aoa_statements"]
    assert got == ["model.embed_tokens.weight -> lm_head.weight"]


def test_a_renaming_statement_moving_only_kept_weights_loses_its_transpose() -> None:
    renaming = {"aoa_statements": [f"{Q}^T -> llama.layers.$LAYER_ID.q.weight"]}
    state = {"llama.layers.0.q.weight": _kept()}
    got = for_kept(renaming, state)["aoa_statements"]
    assert got == [f"{Q} -> llama.layers.$LAYER_ID.q.weight"]


def test_rules_without_kept_targets_are_unchanged() -> None:
    state = {"model.layers.0.self_attn.q_proj.weight": paddle.zeros([2, 2])}
    assert for_kept(RULES, state) == RULES


def test_a_statement_moving_kept_and_ordinary_weights_is_refused() -> None:
    state = {
        "model.layers.0.self_attn.q_proj.weight": _kept(),
        "model.layers.1.self_attn.q_proj.weight": paddle.zeros([2, 2]),
    }
    with pytest.raises(TargetError, match="moves kept weights .* and ordinary ones"):
        for_kept(RULES, state)


QKV = "model.layers.$LAYER_ID.self_attn.{}_proj.weight"
FUSE = "num_heads=4, num_key_value_groups=2"


def test_a_kept_fuse_loses_every_transpose_and_fuses_along_the_outputs() -> None:
    """PaddleFormers fuses [in, out] weights along axis 1 (the default); kept [out, in]
    weights fuse the same outputs along axis 0."""
    dest = "model.layers.$LAYER_ID.self_attn.qkv_proj.weight"
    rules = {
        "aoa_statements": [
            f"{QKV.format('q')}^T, {QKV.format('k')}^T, {QKV.format('v')}^T -> {dest}, "
            f"fused_qkv, {FUSE}",
            "model.layers.$LAYER_ID.mlp.gate_proj.weight^T, "
            "model.layers.$LAYER_ID.mlp.up_proj.weight^T -> "
            "model.layers.$LAYER_ID.mlp.up_gate_proj.weight, axis=1, fused_ffn",
        ]
    }
    state = {
        "model.layers.0.self_attn.qkv_proj.weight": _kept(),
        "model.layers.0.mlp.up_gate_proj.weight": _kept(),
    }
    got = for_kept(rules, state)["aoa_statements"]
    assert got == [
        f"{QKV.format('q')}, {QKV.format('k')}, {QKV.format('v')} -> {dest}, fused_qkv, "
        f"{FUSE}, axis=0",
        "model.layers.$LAYER_ID.mlp.gate_proj.weight, model.layers.$LAYER_ID.mlp.up_proj.weight "
        "-> model.layers.$LAYER_ID.mlp.up_gate_proj.weight, fused_ffn, axis=0",
    ]


def test_a_kept_fuse_into_its_own_name_goes_through_a_scratch_name() -> None:
    """Phi-3's ``qkv_proj.weight^T -> qkv_proj.weight, fused_qkv_old``: AOA refuses X -> X
    (^T went through Paddle's own X_transpose_tmp), so an identity permute names it apart."""
    qkv = "model.layers.0.self_attn.qkv_proj.weight"
    rules = {"aoa_statements": [f"{qkv}^T -> {qkv}, fused_qkv_old, {FUSE}, axis=1"]}
    got = for_kept(rules, {qkv: _kept()})["aoa_statements"]
    assert got == [
        f'{qkv} -> {qkv}_kept_tmp, permute = "[0, 1]"',
        f"{qkv}_kept_tmp -> {qkv}, fused_qkv_old, {FUSE}, axis=0",
    ]


def test_a_kept_fuse_transposing_some_sources_only_is_refused() -> None:
    rules = {"aoa_statements": ["a^T, b -> ab, axis=1"]}
    with pytest.raises(TargetError, match="transposes some of the sources"):
        for_kept(rules, {"ab": _kept()})
