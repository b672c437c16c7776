"""Targets as real models hold them (DESIGN invariant 9): trainable bf16/fp16/f32 parameters of
``paddle.nn`` layers, and AOA statements users get wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import paddle
import pytest

import flexq
from flexq.formatkit.rounding import bfloat16_bits_to_float32

from .conftest import LINEARS, NORM


class TinyMLP(paddle.nn.Layer):  # type: ignore[misc]
    """Paddle's [in, out] Linear layout for the tiny model's MLP, plus its norm."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = paddle.nn.Linear(64, 96, bias_attr=False)
        self.up = paddle.nn.Linear(64, 96, bias_attr=False)
        self.down = paddle.nn.Linear(96, 64, bias_attr=False)
        self.norm = paddle.nn.LayerNorm(64)


STATEMENTS = [
    "model.layers.0.mlp.gate_proj.weight^T -> gate.weight",
    "model.layers.0.mlp.up_proj.weight^T -> up.weight",
    "model.layers.0.mlp.down_proj.weight^T -> down.weight",
    f"{NORM} -> norm.weight",
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_a_trainable_nn_linear_model_loads_exactly(
    format_ckpt: tuple[str, Path], dtype: str
) -> None:
    name, path = format_ckpt
    paddle.set_default_dtype(dtype if dtype != "bfloat16" else "float32")
    try:
        model = TinyMLP()
    finally:
        paddle.set_default_dtype("float32")
    if dtype == "bfloat16":
        model.to(dtype="bfloat16")
    params = {k: v for k, v in model.state_dict().items() if not k.endswith("bias")}
    assert all(not p.stop_gradient for p in params.values())  # what every LLM has
    report = flexq.load_state_dict(
        params, path, aoa_config={"aoa_statements": STATEMENTS}, formats=[name]
    )
    ct = flexq.compose(path, [name])
    for target, key in [
        ("gate.weight", "model.layers.0.mlp.gate_proj.weight"),
        ("up.weight", "model.layers.0.mlp.up_proj.weight"),
        ("down.weight", "model.layers.0.mlp.down_proj.weight"),
    ]:
        want = ct.load(key, dtype).T
        got = params[target]
        bits = (
            got.view(paddle.int16).numpy().view(np.uint16) if dtype == "bfloat16" else got.numpy()
        )
        np.testing.assert_array_equal(bits.view(want.dtype), want, err_msg=target)
    norm_bits = ct.load(NORM, "bfloat16")
    np.testing.assert_array_equal(
        params["norm.weight"].astype("float32").numpy(), bfloat16_bits_to_float32(norm_bits)
    )
    assert ("norm.weight", "bfloat16", dtype) in report.casts or dtype == "bfloat16"


def test_a_statement_whose_macro_expands_to_nothing_names_that_statement(
    format_ckpt: tuple[str, Path],
) -> None:
    name, path = format_ckpt
    targets = {k: paddle.zeros(list(s)) for k, s in LINEARS.items()}
    typo = "model.layer.$LAYER_ID.mlp.down_proj.weight -> d.$LAYER_ID.weight"
    with pytest.raises(flexq.TargetError) as err:
        flexq.load_state_dict(targets, path, aoa_config={"aoa_statements": [typo]}, formats=[name])
    assert repr(typo) in str(err.value)
    assert "expands to nothing" in str(err.value)


def test_aoa_errors_quote_the_statement_not_the_whole_list(
    format_ckpt: tuple[str, Path],
) -> None:
    name, path = format_ckpt
    targets = {k: paddle.zeros(list(s)) for k, s in LINEARS.items()}
    good = [f"{k} -> {k}" for k in LINEARS]
    bad = "model.layers.0.mlp.gat_proj.weight -> g.weight"
    with pytest.raises(flexq.TargetError) as err:
        flexq.load_state_dict(
            targets, path, aoa_config={"aoa_statements": [*good, bad]}, formats=[name]
        )
    message = str(err.value)
    assert repr(bad) in message
    assert "gat_proj" in message
    assert good[0] not in message
