"""Detection from config and headers: claims, per-module schemes, ignore lists and errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import flexq
from flexq import FlexqError, FormatError, RawTensor, TargetSlice, compose
from flexq_gptq.plugin import plugin


def one(
    oracle: Any, bits: int = 4, out_f: int = 32, in_f: int = 64, group: int = 32, **kw: Any
) -> Any:
    return oracle.random_gptq(np.random.default_rng(3), bits, out_f, in_f, group, **kw)


def test_quant_methods_are_gptq_and_auto_round() -> None:
    assert plugin.flexq_quant_methods() == ("gptq", "auto-round", "intel/auto-round")


def test_logical_weight_is_out_by_in_in_the_config_dtype_and_bias_passes_through(
    oracle: Any,
) -> None:
    bias = {"fc.bias": RawTensor.of(np.arange(32, dtype=np.float16))}
    config = {**oracle.gptq_config(4, 32), "torch_dtype": "bfloat16"}
    with oracle.written({"fc": one(oracle)}, config, bias) as ckpt:
        ct = compose(ckpt.path, ["gptq"])
        entry = ct.entry("fc.weight")
        assert (entry.shape, entry.dtype) == ((32, 64), "bfloat16")
        assert ct.entry("fc.bias").is_passthrough
        np.testing.assert_array_equal(ct.load("fc.bias"), np.arange(32, dtype=np.float16))


#: optimum's GPTQConfig.to_dict() as Qwen's -GPTQ-Int4 releases carry it in config.json.
OPTIMUM_CONFIG = {
    "batch_size": 1,
    "bits": 4,
    "block_name_to_quantize": None,
    "cache_block_outputs": True,
    "damp_percent": 0.01,
    "dataset": None,
    "desc_act": False,
    "exllama_config": {"version": 1},
    "group_size": 32,
    "max_input_length": None,
    "model_seqlen": None,
    "module_name_preceding_first_block": None,
    "modules_in_block_to_quantize": None,
    "pad_token_id": None,
    "quant_method": "gptq",
    "sym": True,
    "tokenizer": None,
    "true_sequential": True,
    "use_cuda_fp16": False,
    "use_exllama": True,
}


def test_optimum_config_with_biases_and_a_plain_lm_head(oracle: Any) -> None:
    rng = np.random.default_rng(9)
    q = oracle.random_gptq(rng, 4, 32, 64, 32)
    down = oracle.random_gptq(rng, 4, 64, 32, 32)
    plain = {
        "model.layers.0.self_attn.q_proj.bias": RawTensor.of(np.ones(32, np.float16)),
        "lm_head.weight": RawTensor.of(np.ones((8, 64), np.float16)),
    }
    config = {
        "quantization_config": {
            **OPTIMUM_CONFIG,
            "block_name_to_quantize": "model.layers",
            "modules_in_block_to_quantize": [["self_attn.q_proj"], ["mlp.down_proj"]],
        },
        "torch_dtype": "float16",
    }
    linears = {"model.layers.0.self_attn.q_proj": q, "model.layers.0.mlp.down_proj": down}
    with oracle.written(linears, config, plain) as ckpt:
        ct = compose(ckpt.path, ["gptq"])
        assert ct.entry("lm_head.weight").is_passthrough
        assert ct.entry("model.layers.0.self_attn.q_proj.bias").is_passthrough
        for prefix, lin in linears.items():
            oracle.same_bits(ct.load(f"{prefix}.weight", "float32"), lin.reference())
    with oracle.written(linears, {"quantization_config": OPTIMUM_CONFIG}) as ckpt:
        assert len(compose(ckpt.path, ["gptq"]).entries) == 2


def test_natural_dtype_falls_back_to_the_scales_dtype(oracle: Any) -> None:
    with oracle.written({"fc": one(oracle, scale_dtype="BF16")}, oracle.gptq_config(4, 32)) as ckpt:
        assert compose(ckpt.path, ["gptq"]).entry("fc.weight").dtype == "bfloat16"


def test_newer_gptqmodel_format_key_selects_v2(oracle: Any) -> None:
    lin = one(oracle, v1=False)
    config = oracle.gptq_config(4, 32, v1=False)
    del config["quantization_config"]["checkpoint_format"]
    config["quantization_config"].update(format="gptq_v2", method="gptq")
    with oracle.written({"fc": lin}, config) as ckpt:
        got = compose(ckpt.path, ["gptq"]).load("fc.weight", "float32")
    oracle.same_bits(got, lin.reference())


def test_v1_and_v2_read_the_same_words_one_apart(oracle: Any) -> None:
    lin = one(oracle, g_idx="none")
    with oracle.written({"fc": lin}, oracle.gptq_config(4, 32, v1=True)) as ckpt:
        v1 = compose(ckpt.path, ["gptq"]).load("fc.weight", "float32")
    lin.v1 = False
    with oracle.written({"fc": lin}, oracle.gptq_config(4, 32, v1=False)) as ckpt:
        v2 = compose(ckpt.path, ["gptq"]).load("fc.weight", "float32")
    oracle.same_bits(v2, lin.reference())
    assert not np.array_equal(v1, v2)


@pytest.mark.parametrize(
    ("packing", "v1"),
    [
        ("auto_round:auto_gptq", True),
        ("auto_round:gptq", True),
        (None, True),  # transformers' AutoRoundConfig default
        ("auto_round", False),
        ("auto_round:gptqmodel", False),
    ],
)
def test_auto_round_packing_formats_choose_the_zero_convention(
    oracle: Any, packing: str | None, v1: bool
) -> None:
    lin = one(oracle, bits=2, v1=v1)
    qc: dict[str, Any] = {
        "quant_method": "auto-round",
        "bits": 2,
        "group_size": 32,
        "sym": False,
        "data_type": "int",
        "block_name_to_quantize": "model.layers.0",  # as auto-round 0.15.1 writes it
    }
    if packing is not None:
        qc["packing_format"] = packing
    with oracle.written({"model.layers.0.fc": lin}, {"quantization_config": qc}) as ckpt:
        got = compose(ckpt.path, ["gptq"]).load("model.layers.0.fc.weight", "float32")
    oracle.same_bits(got, lin.reference())


def test_dynamic_and_extra_config_override_bits_and_group_size_per_module(oracle: Any) -> None:
    rng = np.random.default_rng(5)
    down = oracle.random_gptq(rng, 8, 32, 64, 16)
    up = oracle.random_gptq(rng, 4, 32, 64, 32)
    config = oracle.gptq_config(4, 32, dynamic={"+:.*down_proj": {"bits": 8, "group_size": 16}})
    with oracle.written({"m.down_proj": down, "m.up_proj": up}, config) as ckpt:
        ct = compose(ckpt.path, ["gptq"])
        oracle.same_bits(ct.load("m.down_proj.weight", "float32"), down.reference())
        oracle.same_bits(ct.load("m.up_proj.weight", "float32"), up.reference())
    qc = {
        "quant_method": "auto-round",
        "bits": 4,
        "group_size": 32,
        "sym": True,
        "packing_format": "auto_round",
        "extra_config": {"m.down_proj": {"bits": 8, "group_size": 16}},
    }
    down.v1 = up.v1 = False
    with oracle.written(
        {"m.down_proj": down, "m.up_proj": up}, {"quantization_config": qc}
    ) as ckpt:
        ct = compose(ckpt.path, ["gptq"])
        oracle.same_bits(ct.load("m.down_proj.weight", "float32"), down.reference())


def test_dynamic_desc_act_override_plans_act_order_for_that_module(oracle: Any) -> None:
    lin = one(oracle, g_idx="permuted")
    config = oracle.gptq_config(4, 32, dynamic={"+:fc": {"desc_act": True}})
    with oracle.written({"fc": lin}, config) as ckpt:
        ct = compose(ckpt.path, ["gptq"])
        target = TargetSlice((32, 64), (32, 16), (0, 0), "float32")
        plan = ct.plan("fc.weight", target)
        assert plan.source_slices["fc.scales"] == ((0, 0), (2, 32))  # every group
        got = ct.decode("fc.weight", ct.read_sources(plan), plan, "float32")
        oracle.same_bits(got, lin.reference()[:, :16])


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"modules_to_not_convert": ["down_proj"]}, "modules_to_not_convert lists 'down_proj'"),
        ({"dynamic": {"-:.*down_proj": {}}}, "dynamic rule '-:.*down_proj' excludes it"),
        ({"extra_config": {"m.down_proj": {"bits": 16}}}, "bits >= 16"),
        ({"block_name_to_quantize": "model.layers"}, "block_name_to_quantize"),
        ({"modules_in_block_to_quantize": [["up_proj"]]}, "modules_in_block_to_quantize"),
    ],
)
def test_a_quantized_module_the_config_leaves_unquantized_is_an_error(
    oracle: Any, extra: dict[str, Any], why: str
) -> None:
    with (
        oracle.written({"m.down_proj": one(oracle)}, oracle.gptq_config(4, 32, **extra)) as ckpt,
        pytest.raises(FormatError) as err,
    ):
        compose(ckpt.path, ["gptq"])
    message = str(err.value)
    assert "m.down_proj.qweight" in message
    assert why in message
    assert "format 'gptq'" in message
    assert "model.safetensors" in message


def test_quantized_lm_head_needs_lm_head_true(oracle: Any) -> None:
    with (
        oracle.written({"lm_head": one(oracle)}, oracle.gptq_config(4, 32)) as ckpt,
        pytest.raises(FormatError, match="lm_head is false"),
    ):
        compose(ckpt.path, ["gptq"])
    with oracle.written({"lm_head": one(oracle)}, oracle.gptq_config(4, 32, lm_head=True)) as ckpt:
        assert "lm_head.weight" in compose(ckpt.path, ["gptq"]).entries


def drop(tensors: dict[str, RawTensor], key: str) -> dict[str, RawTensor]:
    return {k: v for k, v in tensors.items() if k != key}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: drop(t, "fc.qzeros"), "'fc.qweight' has no companion fc.qzeros"),
        (lambda t: drop(t, "fc.scales"), "'fc.qweight' has no companion fc.scales"),
        (
            lambda t: {**t, "fc.scales": RawTensor.of(np.zeros((2, 32), np.int32))},
            "'fc.scales' has dtype I32, expected F16 or BF16 or F32",
        ),
        (
            lambda t: {**t, "fc.qzeros": RawTensor.of(np.zeros((2, 5), np.int32))},
            "'fc.qzeros' has shape (2, 5), expected (2, 4)",
        ),
        (
            lambda t: {**t, "fc.g_idx": RawTensor.of(np.zeros((63,), np.int32))},
            "'fc.g_idx' has shape (63,), expected (64,)",
        ),
        (
            lambda t: {**t, "fc.g_idx": RawTensor.of(np.zeros((64,), np.int64))},
            "'fc.g_idx' has dtype I64, expected I32",
        ),
        (
            lambda t: {**t, "fc.qweight": RawTensor.of(np.zeros((8, 12), np.int32))},
            "12 output features, not a multiple of 8",
        ),
        (
            lambda t: {**t, "fc.weight": RawTensor.of(np.zeros((32, 64), np.float16))},
            "'fc.qweight' sits beside a stored fc.weight",
        ),
    ],
)
def test_broken_linear_is_an_error_naming_file_tensor_and_format(
    oracle: Any, tmp_path: Any, change: Any, message: str
) -> None:
    tensors = change(one(oracle).raw("fc"))
    path = flexq.save_checkpoint(tmp_path / "c", tensors, config=oracle.gptq_config(4, 32))
    with pytest.raises(FormatError) as err:
        compose(path, ["gptq"])
    assert message in str(err.value)
    assert "model.safetensors" in str(err.value)
    assert "format 'gptq'" in str(err.value)


def test_three_bit_rows_must_be_whole_three_word_units(oracle: Any, tmp_path: Any) -> None:
    tensors = {
        "fc.qweight": RawTensor.of(np.zeros((4, 32), np.int32)),
        "fc.qzeros": RawTensor.of(np.zeros((1, 3), np.int32)),
        "fc.scales": RawTensor.of(np.ones((1, 32), np.float16)),
    }
    path = flexq.save_checkpoint(tmp_path / "c", tensors, config=oracle.gptq_config(3, -1))
    with pytest.raises(FormatError, match="4 rows are not a positive whole number of 3-bit units"):
        compose(path, ["gptq"])


@pytest.mark.parametrize("desc_act", [True, False])
def test_g_idx_naming_a_missing_group_is_an_error(oracle: Any, desc_act: bool) -> None:
    lin = one(oracle, g_idx="trivial")
    lin.g_idx[40] = 7
    with oracle.written({"fc": lin}, oracle.gptq_config(4, 32, desc_act=desc_act)) as ckpt:
        ct = compose(ckpt.path, ["gptq"])
        plan = ct.plan("fc.weight", TargetSlice((32, 64), (32, 30), (0, 30), "float32"))
        sources = ct.read_sources(plan)
        with pytest.raises(FormatError, match=r"'fc.g_idx' holds group 7 at \[40\], outside 0..1"):
            ct.decode("fc.weight", sources, plan, "float32")


def test_act_order_g_idx_under_desc_act_false_decodes_whole_but_not_in_slices(
    oracle: Any,
) -> None:
    """Planned from the config, a slice reads only its i // g groups; a g_idx that
    scatters them anyway is an error there (the whole weight has every group)."""
    lin = one(oracle, g_idx="permuted")
    with oracle.written({"fc": lin}, oracle.gptq_config(4, 32)) as ckpt:
        ct = compose(ckpt.path, ["gptq"])
        oracle.same_bits(ct.load("fc.weight", "float32"), lin.reference())
        plan = ct.plan("fc.weight", TargetSlice((32, 64), (32, 16), (0, 0), "float32"))
        sources = ct.read_sources(plan)
        with pytest.raises(FormatError, match="that desc_act: false promises"):
            ct.decode("fc.weight", sources, plan, "float32")


def test_desc_act_needs_g_idx(oracle: Any) -> None:
    config = oracle.gptq_config(4, 32, desc_act=True)
    with (
        oracle.written({"fc": one(oracle, g_idx="none")}, config) as ckpt,
        pytest.raises(FormatError, match="has no fc.g_idx, which desc_act: true needs"),
    ):
        compose(ckpt.path, ["gptq"])


def test_orphan_g_idx_is_recognised_and_reported(oracle: Any) -> None:
    orphan = {"other.g_idx": RawTensor.of(np.zeros(64, np.int32))}
    with oracle.written({"fc": one(oracle)}, oracle.gptq_config(4, 32), orphan) as ckpt:
        recognized = plugin.flexq_recognized_keys(flexq.Checkpoint(ckpt.path))
        assert "other.g_idx" in recognized
        with pytest.raises(FlexqError, match="other.g_idx"):
            compose(ckpt.path, ["gptq"])


def test_gptq_config_without_any_qweight_is_an_error(oracle: Any, tmp_path: Any) -> None:
    path = flexq.save_checkpoint(
        tmp_path / "c",
        {"w": RawTensor.of(np.ones((4, 4), np.float16))},
        config=oracle.gptq_config(4, 32),
    )
    with pytest.raises(
        FormatError, match="quant_method 'gptq', but no tensor is a '<module>.qweight'"
    ):
        compose(path, ["gptq"])


def test_gptq_tensors_without_a_quantization_config_are_an_error(
    oracle: Any, tmp_path: Any
) -> None:
    path = flexq.save_checkpoint(
        tmp_path / "c", one(oracle).raw("fc"), config={"model_type": "llama"}
    )
    with pytest.raises(FormatError, match="has no quantization_config"):
        compose(path, ["gptq"])


def test_autogptq_quantize_config_json_is_read_when_config_json_has_none(
    oracle: Any, tmp_path: Any
) -> None:
    import json

    lin = one(oracle)
    path = flexq.save_checkpoint(tmp_path / "c", lin.raw("fc"), config={"model_type": "llama"})
    qc = {"bits": 4, "group_size": 32, "desc_act": False, "sym": False, "true_sequential": True}
    (path / "quantize_config.json").write_text(json.dumps(qc))
    oracle.same_bits(compose(path, ["gptq"]).load("fc.weight", "float32"), lin.reference())
    (path / "quantize_config.json").write_text(json.dumps({**qc, "bits": 6}))
    with pytest.raises(FormatError, match=r"quantize_config.json: quantize_config.bits: .*must be"):
        compose(path, ["gptq"])
    # beside plain weights (a dequantized copy) the file is not read
    plain = flexq.save_checkpoint(
        tmp_path / "plain", {"fc.weight": RawTensor.of(np.ones((4, 4), np.float16))}
    )
    (plain / "quantize_config.json").write_text(json.dumps(qc))
    assert plugin.flexq_logical_metadata(flexq.Checkpoint(plain)) == {}


def test_another_method_is_not_claimed(oracle: Any, tmp_path: Any) -> None:
    path = flexq.save_checkpoint(
        tmp_path / "c",
        {"w": RawTensor.of(np.ones((4, 4), np.float16))},
        config={"quantization_config": {"quant_method": "fp8"}},
    )
    assert plugin.flexq_logical_metadata(flexq.Checkpoint(path)) == {}


@pytest.mark.parametrize(
    ("qc", "field", "message"),
    [
        ({"bits": 5}, "bits", "must be one of 2, 3, 4, 8"),
        ({"group_size": 0}, "group_size", "must be -1 or positive"),
        ({"sym": "maybe"}, "sym", "valid boolean"),
        ({"checkpoint_format": "marlin"}, "checkpoint_format", "'marlin' is not a GPTQ layout"),
        (
            {"checkpoint_format": None, "format": "gptq_p"},
            "format",
            "'gptq_p' is not a GPTQ layout",
        ),
        ({"pack_dtype": "int64"}, "pack_dtype", "'int64' words are not supported"),
        ({"dynamic": {"+:(": {"bits": 8}}}, "dynamic", "is not a regular expression"),
        ({"dynamic": {"+:.*": {"bits": 5}}}, "(override for 'fc')", "bits must be one of"),
        (
            {"quant_method": "auto-round", "packing_format": "auto_round:auto_awq"},
            "packing_format",
            "'auto_round:auto_awq' is not a GPTQ layout",
        ),
        ({"quant_method": "auto-round", "act_bits": 8}, "act_bits", "8-bit activations"),
        (
            {"quant_method": "auto-round", "extra_config": {"fc": {"data_type": "mx_fp"}}},
            "(override for 'fc')",
            "data_type 'mx_fp' is not an integer GPTQ layout",
        ),
        (
            {"modules_in_block_to_quantize": [["fc("]]},
            "modules_in_block_to_quantize",
            "is not a regular expression",
        ),
    ],
)
def test_config_errors_name_the_file_and_field(
    oracle: Any, qc: dict[str, Any], field: str, message: str
) -> None:
    config = oracle.gptq_config(4, 32)
    config["quantization_config"].update(qc)
    with oracle.written({"fc": one(oracle)}, config) as ckpt, pytest.raises(FormatError) as err:
        compose(ckpt.path, ["gptq"])
    text = str(err.value)
    assert str(ckpt.path / "config.json") in text
    assert f"quantization_config.{field}" in text or field in text
    assert message in text


@pytest.mark.parametrize("data_type", ["fp", "nv_fp", "mx_fp"])
def test_auto_round_float_exports_are_left_to_the_float_formats(
    oracle: Any, data_type: str
) -> None:
    # auto-round names FP8 / NVFP4 / MXFP4 exports with the same quant_method: gptq
    # claims none of them, and the core says no claimer of 'auto-round' found tensors.
    config = oracle.gptq_config(4, 32)
    config["quantization_config"].update(
        {"quant_method": "auto-round", "data_type": data_type, "group_size": 0}
    )
    with oracle.written({"fc": one(oracle)}, config) as ckpt, pytest.raises(FormatError) as err:
        compose(ckpt.path, ["gptq"])
    assert "'auto-round', but format 'gptq' found none of its tensors" in str(err.value)


def test_a_nan_scale_warns_naming_the_tensor_and_decodes_as_nan(oracle: Any) -> None:
    from flexq import ScaleWarning

    lin = one(oracle, g_idx="trivial")
    lin.scales[1, 5] = np.nan
    with oracle.written({"fc": lin}, oracle.gptq_config(4, 32)) as ckpt:
        ct = compose(ckpt.path, ["gptq"])
        assert ct.plan("fc.weight", TargetSlice.whole((32, 64), "float32")).scales == ("fc.scales",)
        with pytest.warns(ScaleWarning, match=r"'fc.scales': scale nan at \[1, 5\]"):
            got = ct.load("fc.weight", "float32")
    assert np.isnan(got[5, 32:]).all()
    assert not np.isnan(np.delete(got, 5, axis=0)).any()
