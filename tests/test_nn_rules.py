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
