"""Detection from config.json and headers, and every broken layout as a FormatError."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flexq import (
    Checkpoint,
    FormatError,
    RawTensor,
    ScaleWarning,
    TargetSlice,
    compose,
    save_checkpoint,
)
from flexq_ct_int.detect import analyze

BF16_ONES = RawTensor("BF16", np.full((8, 8), 0x3F80, np.uint16))


def layout(oracle: Any, **kw: Any) -> Any:
    shape = kw.pop("shape", (16, 64))
    args: dict[str, Any] = dict(fmt="pack-quantized", bits=4, strategy="group", group=16)
    args.update(kw)
    return oracle.random_case(np.random.default_rng(1), shape=shape, **args)


def write(
    path: Path,
    case: Any,
    *,
    drop: tuple[str, ...] = (),
    extra: dict[str, RawTensor] | None = None,
    config: dict[str, Any] | None = None,
) -> Path:
    tensors = {f"fc.{k}": v for k, v in case.tensors.items() if k not in drop}
    tensors.update(extra or {})
    return save_checkpoint(path, tensors, config=case.config() if config is None else config)


def fails(path: Path, *needles: str) -> str:
    with pytest.raises(FormatError) as info:
        compose(path, ["ct-int"]).load("fc.weight", "float32")
    message = str(info.value)
    for needle in ("ct-int", *needles):
        assert needle in message, message
    return message


def test_llm_compressor_w4a16_layout_is_claimed_with_the_config_dtype(
    tmp_path: Path, oracle: Any
) -> None:
    case = layout(oracle)
    extra = {
        "lm_head.weight": BF16_ONES,
        "fc.input_scale": RawTensor.of(np.ones(1, np.float32)),
        "fc.input_zero_point": RawTensor.of(np.zeros(1, np.int8)),
    }
    ct = compose(write(tmp_path, case, extra=extra), ["ct-int"])
    entry = ct.entries["fc.weight"]
    assert (entry.owner, entry.shape, entry.dtype) == ("ct-int", (16, 64), "bfloat16")
    assert set(entry.sources) == {"fc.weight_packed", "fc.weight_scale", "fc.weight_shape"}
    # Activation parameters and unquantized weights pass through untouched.
    for key in ("lm_head.weight", "fc.input_scale", "fc.input_zero_point"):
        assert ct.entries[key].is_passthrough
    np.testing.assert_array_equal(ct.load("fc.input_zero_point", "int8"), np.zeros(1, np.int8))
    np.testing.assert_array_equal(ct.load("fc.weight", "float32"), case.expected)


def test_group_strategy_headers_pin_in_features_without_reading_data(
    tmp_path: Path, oracle: Any
) -> None:
    ckpt = Checkpoint(write(tmp_path, layout(oracle, shape=(8, 48))))
    assert analyze(ckpt).tensors["fc.weight"].shape == (8, 48)
    assert ckpt.bytes_read == 0


def test_channel_strategy_reads_weight_shape_when_the_width_leaves_in_open(
    tmp_path: Path, oracle: Any
) -> None:
    case = layout(oracle, strategy="channel", shape=(8, 61))  # 8 words hold 57..64 codes
    ckpt = Checkpoint(write(tmp_path / "a", case))
    assert analyze(ckpt).tensors["fc.weight"].shape == (8, 61)
    assert ckpt.bytes_read == 16
    np.testing.assert_array_equal(
        compose(ckpt, ["ct-int"]).load("fc.weight", "float32"), case.expected
    )
    wrong = {"fc.weight_shape": RawTensor.of(np.array([8, 70], np.int64))}
    fails(
        write(tmp_path / "b", case, drop=("weight_shape",), extra=wrong),
        "fc.weight_shape",
        "[8, 57..64]",
    )


def test_a_contradicting_weight_shape_is_an_error_on_every_plan(
    tmp_path: Path, oracle: Any
) -> None:
    case = layout(oracle)
    wrong = {"fc.weight_shape": RawTensor.of(np.array([16, 63], np.int64))}
    ct = compose(write(tmp_path, case, drop=("weight_shape",), extra=wrong), ["ct-int"])
    for target in (
        TargetSlice((16, 64), (4, 8), (2, 8), "float32"),
        TargetSlice.whole((16, 64), "float32"),
    ):
        plan = ct.plan("fc.weight", target, force_global=target.is_whole)
        assert plan.source_slices["fc.weight_shape"] == ((0,), (2,))
        assert "fc.weight_shape" in plan.checks  # read and checked before the first write
        with pytest.raises(FormatError, match=r"fc.weight_shape.*\(16, 63\).*\(16, 64\).*ct-int"):
            ct.check_plan("fc.weight", plan, ct.read_sources(plan))


def test_pack_quantized_without_a_compressed_tensors_config_is_an_error(
    tmp_path: Path, oracle: Any
) -> None:
    fails(
        write(tmp_path, layout(oracle), config={}),
        "model.safetensors",
        "fc.weight_packed",
        "num_bits",
    )


@pytest.mark.parametrize(
    ("drop", "needle"),
    [("weight_scale", "fc.weight_scale"), ("weight_shape", "fc.weight_shape")],
)
def test_a_missing_companion_is_an_error_naming_it(
    tmp_path: Path, oracle: Any, drop: str, needle: str
) -> None:
    fails(write(tmp_path, layout(oracle), drop=(drop,)), "model.safetensors", needle, "missing")


def test_asymmetric_without_zero_point_and_symmetric_with_one_are_errors(
    tmp_path: Path, oracle: Any
) -> None:
    asym = layout(oracle, symmetric=False)
    fails(write(tmp_path / "a", asym, drop=("weight_zero_point",)), "fc.weight_zero_point")
    sym_config = layout(oracle).config()
    fails(write(tmp_path / "b", asym, config=sym_config), "fc.weight_zero_point", "symmetric")


def test_a_zero_point_neither_packed_nor_per_scale_is_an_error(tmp_path: Path, oracle: Any) -> None:
    case = layout(oracle, symmetric=False)
    raw = {"fc.weight_zero_point": RawTensor.of(np.zeros((16, 5), np.int8))}
    fails(write(tmp_path, case, drop=("weight_zero_point",), extra=raw), "I32 (2, 4)", "(16, 4)")


@pytest.mark.parametrize("dtype", [np.int8, np.int32])
def test_unpacked_zero_points_of_older_compressed_tensors_decode(
    tmp_path: Path, oracle: Any, dtype: type
) -> None:
    case = layout(oracle, symmetric=False)
    packed = case.tensors["weight_zero_point"].data
    z = oracle.bitunpack(packed.T.copy(), 4, 16).T - 8  # the signed zero points
    raw = {"fc.weight_zero_point": RawTensor.of(z.astype(dtype))}
    ct = compose(write(tmp_path, case, drop=("weight_zero_point",), extra=raw), ["ct-int"])
    np.testing.assert_array_equal(ct.load("fc.weight", "float32"), case.expected)


@pytest.mark.parametrize("entry", ["fc", "re:f.$", "re:.*"])
def test_a_quantized_module_the_ignore_list_names_is_an_error(
    tmp_path: Path, oracle: Any, entry: str
) -> None:
    case = layout(oracle)
    config = case.config()
    config["quantization_config"]["ignore"] = [entry]
    fails(write(tmp_path, case, config=config), "fc.weight_packed", repr(entry))


def test_ignore_entries_naming_other_modules_do_not_match(tmp_path: Path, oracle: Any) -> None:
    case = layout(oracle)
    config = case.config()
    config["quantization_config"]["ignore"] = ["lm_head", "f", "re:model\\..*", "fc.sub"]
    ct = compose(write(tmp_path, case, config=config), ["ct-int"])
    np.testing.assert_array_equal(ct.load("fc.weight", "float32"), case.expected)


def test_a_group_declaring_another_format_or_float_weights_is_an_error(
    tmp_path: Path, oracle: Any
) -> None:
    case = layout(oracle)
    config = case.config()
    qc = config["quantization_config"]
    qc["format"] = qc["config_groups"]["group_0"]["format"] = "marlin-24"
    fails(write(tmp_path / "a", case, config=config), "marlin-24")
    config = case.config()
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["type"] = "float"
    fails(write(tmp_path / "b", case, config=config), "'float'")


def test_no_group_targeting_the_module_is_an_error(tmp_path: Path, oracle: Any) -> None:
    case = layout(oracle)
    config = case.config()
    config["quantization_config"]["config_groups"]["group_0"]["targets"] = ["re:.*mlp.*"]
    fails(write(tmp_path, case, config=config), "no quantization_config.config_groups")


@pytest.mark.parametrize("dense", [True, False])
def test_odd_widths_follow_the_config_version_and_need_one(
    tmp_path: Path, oracle: Any, dense: bool
) -> None:
    # 48 columns of 3 bits: 5 words dense (0.18 on), 5 words of 10 codes (0.17) too,
    # laid out differently.
    case = layout(oracle, bits=3, shape=(16, 48), dense=dense)
    ct = compose(write(tmp_path / "a", case), ["ct-int"])
    np.testing.assert_array_equal(ct.load("fc.weight", "float32"), case.expected)
    config = case.config()
    del config["quantization_config"]["version"]
    fails(write(tmp_path / "b", case, config=config), "num_bits 3", "version")


def test_a_scale_grid_that_does_not_fit_is_an_error(tmp_path: Path, oracle: Any) -> None:
    case = layout(oracle)
    bad = {"fc.weight_scale": oracle.stored_scale(np.ones((16, 3), np.float32), "BF16")}
    fails(write(tmp_path, case, drop=("weight_scale",), extra=bad), "fc.weight_scale", "(16, 3)")


def test_act_order_config_without_g_idx_is_an_error(tmp_path: Path, oracle: Any) -> None:
    case = layout(oracle, act_order=True)
    fails(write(tmp_path, case, drop=("weight_g_idx",)), "fc.weight_g_idx", "act-order")


def test_g_idx_entries_out_of_range_are_an_error_at_load(tmp_path: Path, oracle: Any) -> None:
    case = layout(oracle, act_order=True)
    g = case.g_idx.copy()
    g[5] = 4
    bad = {"fc.weight_g_idx": RawTensor.of(g)}
    fails(write(tmp_path, case, drop=("weight_g_idx",), extra=bad), "fc.weight_g_idx", "entry 5")


def test_an_uninitialised_g_idx_means_column_order(tmp_path: Path, oracle: Any) -> None:
    case = layout(oracle)
    minus = {"fc.weight_g_idx": RawTensor.of(np.full(64, -1, np.int32))}
    ct = compose(write(tmp_path, case, extra=minus), ["ct-int"])
    np.testing.assert_array_equal(ct.load("fc.weight", "float32"), case.expected)


def test_int_quantized_without_config_reads_the_strategy_off_the_scale(
    tmp_path: Path, oracle: Any
) -> None:
    layouts: list[tuple[str, dict[str, Any]]] = [
        ("channel", {}),
        ("tensor", {}),
        ("group", {"group": 16}),
        ("block", {"block": (4, 16)}),
    ]
    for n, (strategy, kw) in enumerate(layouts):
        case = layout(
            oracle, fmt="int-quantized", bits=8, strategy=strategy, symmetric=n % 2 == 0, **kw
        )
        ct = compose(write(tmp_path / str(n), case, config={}), ["ct-int"])
        np.testing.assert_array_equal(ct.load("fc.weight", "float32"), case.expected)


def test_int8_layouts_of_other_quant_methods_are_left_alone(tmp_path: Path, oracle: Any) -> None:
    case = layout(oracle, fmt="int-quantized", bits=8, strategy="channel")
    path = write(tmp_path, case, config={"quantization_config": {"quant_method": "other"}})
    assert analyze(Checkpoint(path)).tensors == {}


def test_u8_packed_weights_of_other_formats_are_never_claimed(tmp_path: Path) -> None:
    tensors = {
        "fc.weight_packed": RawTensor.of(np.zeros((8, 16), np.uint8)),
        "fc.weight_scale": RawTensor("F8_E4M3", np.full((8, 2), 0x38, np.uint8)),
        "fc.weight_global_scale": RawTensor.of(np.ones(1, np.float32)),
    }
    qc = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}
    found = analyze(
        Checkpoint(save_checkpoint(tmp_path, tensors, config={"quantization_config": qc}))
    )
    assert found.tensors == {}
    assert found.recognized == frozenset()


def test_an_orphaned_companion_is_reported_by_the_core(tmp_path: Path, oracle: Any) -> None:
    case = layout(oracle)
    extra = {"other.weight_shape": RawTensor.of(np.array([4, 4], np.int64))}
    with pytest.raises(FormatError, match="other.weight_shape.*orphaned"):
        compose(write(tmp_path, case, extra=extra), ["ct-int"])


def test_mixed_precision_groups_pick_each_modules_scheme(tmp_path: Path, oracle: Any) -> None:
    w4 = oracle.random_case(
        np.random.default_rng(2),
        fmt="pack-quantized",
        bits=4,
        strategy="group",
        shape=(16, 64),
        group=32,
        symmetric=False,
    )
    w8 = oracle.random_case(np.random.default_rng(3), fmt="int-quantized", bits=8,
                            strategy="channel", shape=(16, 64))  # fmt: skip
    g4, g8 = copy.deepcopy(w4.config()), copy.deepcopy(w8.config())
    groups = {
        "group_0": {
            **g4["quantization_config"]["config_groups"]["group_0"],
            "targets": ["re:.*mlp.*"],
        },
        "group_1": g8["quantization_config"]["config_groups"]["group_0"],
    }
    qc = {"quant_method": "compressed-tensors", "format": "mixed-precision",
          "config_groups": groups, "ignore": []}  # fmt: skip
    tensors = {f"model.mlp.up.{k}": v for k, v in w4.tensors.items()}
    tensors.update({f"model.attn.q.{k}": v for k, v in w8.tensors.items()})
    ct = compose(save_checkpoint(tmp_path, tensors, config={"quantization_config": qc}), ["ct-int"])
    np.testing.assert_array_equal(ct.load("model.mlp.up.weight", "float32"), w4.expected)
    np.testing.assert_array_equal(ct.load("model.attn.q.weight", "float32"), w8.expected)


def test_a_malformed_config_is_an_error_naming_the_field(tmp_path: Path, oracle: Any) -> None:
    case = layout(oracle)
    config = case.config()
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = "four"
    fails(
        write(tmp_path, case, config=config),
        "config.json",
        "config_groups.group_0.weights.num_bits",
    )


def test_a_non_finite_scale_is_reported_by_the_declared_scale_check(
    tmp_path: Path, oracle: Any
) -> None:
    case = layout(oracle)
    s = np.ones((16, 4), np.float32)
    s[3, 2] = np.nan
    bad = {"fc.weight_scale": oracle.stored_scale(s, "BF16")}
    ct = compose(write(tmp_path, case, drop=("weight_scale",), extra=bad), ["ct-int"])
    plan = ct.plan("fc.weight", TargetSlice((16, 64), (8, 32), (0, 32), "float32"))
    assert plan.scales == ("fc.weight_scale",)
    with pytest.warns(ScaleWarning, match=r"fc.weight_scale.*\[3, 2\].*ct-int"):
        got = ct.load("fc.weight", "float32")
    assert np.isnan(got[3, 32:48]).all()
    assert not np.isnan(np.delete(got, 3, axis=0)).any()
