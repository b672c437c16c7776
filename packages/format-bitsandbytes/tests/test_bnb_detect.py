"""Detection: what is claimed, what passes through, and every broken case as a FormatError."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq import FormatError, RawTensor
from flexq_bitsandbytes.plugin import plugin

FORMATS = ["bitsandbytes"]
Build = Callable[..., Path]
KEY = "model.layers.0.self_attn.q_proj.weight"


def four_bit(kit: Any, nested: bool = True, quant_type: str = "nf4") -> dict[str, RawTensor]:
    case = kit.random_4bit(np.random.default_rng(0), (4, 32), quant_type, 64, nested)
    return dict(kit.tensors_4bit(KEY, case))


def blob(state: object) -> RawTensor:
    return RawTensor("U8", np.frombuffer(json.dumps(state).encode(), np.uint8).copy())


def test_claims_4bit_and_int8_and_passes_the_rest_through(
    tmp_path: Path, build: Build, kit: Any
) -> None:
    tensors = four_bit(kit)
    cb, scb = kit.random_int8(np.random.default_rng(1), 3, 5)
    tensors.update(kit.tensors_int8("model.layers.0.mlp.up_proj", cb, scb))
    tensors["lm_head.weight"] = RawTensor("F32", np.ones((2, 2), np.float32))
    ct = flexq.compose(build(tmp_path / "c", tensors, kit.config_4bit()), formats=FORMATS)
    owners = {k: e.owner for k, e in ct.entries.items()}
    assert owners == {
        KEY: "bitsandbytes",
        "model.layers.0.mlp.up_proj.weight": "bitsandbytes",
        "lm_head.weight": "passthrough",
    }
    assert ct.entries["lm_head.weight"].is_passthrough
    assert set(ct.entries[KEY].sources) == {
        KEY,
        KEY + ".absmax",
        KEY + ".quant_map",
        KEY + ".nested_absmax",
        KEY + ".nested_quant_map",
        KEY + ".quant_state.bitsandbytes__nf4",
    }


def test_names_alone_are_enough_without_a_config(tmp_path: Path, build: Build, kit: Any) -> None:
    ct = flexq.compose(build(tmp_path / "c", four_bit(kit, nested=False)), formats=FORMATS)
    assert ct.entries[KEY].owner == "bitsandbytes"
    assert ct.entries[KEY].shape == (4, 32)


def test_quant_methods_hook() -> None:
    assert plugin.flexq_quant_methods() == ("bitsandbytes",)


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        (".absmax", "no absmax tensor"),
        (".quant_map", "no code book tensor"),
        (".nested_absmax", "no nested absmax tensor"),
        (".nested_quant_map", "no nested code book tensor"),
        ("", "no packed codes tensor"),
    ],
)
def test_missing_companion_is_a_format_error_naming_it(
    tmp_path: Path, build: Build, kit: Any, drop: str, message: str
) -> None:
    tensors = four_bit(kit)
    del tensors[KEY + drop]
    with pytest.raises(FormatError, match=message) as err:
        flexq.compose(build(tmp_path / "c", tensors, kit.config_4bit()), formats=FORMATS)
    assert "model.safetensors" in str(err.value)
    assert "bitsandbytes" in str(err.value)
    assert repr(KEY + drop) in str(err.value)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (".absmax", RawTensor("F32", np.ones(2, np.float32)), "expected U8"),
        (".nested_absmax", RawTensor("F32", np.ones(3, np.float32)), r"expected F32 \[1\]"),
        ("", RawTensor("U8", np.zeros((32, 1), np.uint8)), r"expected U8 \[64, 1\]"),
        ("", RawTensor("BF16", np.zeros((32, 1), np.uint16)), "quant_storage"),
    ],
)
def test_mis_shaped_companion_is_a_format_error(
    tmp_path: Path, build: Build, kit: Any, key: str, value: RawTensor, message: str
) -> None:
    tensors = four_bit(kit)
    tensors[KEY + key] = value
    with pytest.raises(FormatError, match=message):
        flexq.compose(build(tmp_path / "c", tensors, kit.config_4bit()), formats=FORMATS)


STATE = {"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [4, 32]}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (RawTensor("U8", np.frombuffer(b"{not json", np.uint8).copy()), "not valid JSON"),
        (blob([1, 2]), "not a JSON object"),
        (blob({k: v for k, v in STATE.items() if k != "shape"}), "'shape'"),
        (blob({**STATE, "quant_type": "fp4"}), "its name says 'nf4'"),
        (blob({**STATE, "dtype": "int8"}), "'dtype'"),
        (blob({**STATE, "blocksize": 0}), "'blocksize'"),
        (blob({**STATE, "nested_blocksize": 256}), "only some of"),
        (blob({**STATE, "surprise": 1}), "'surprise'"),
        (RawTensor("F32", np.zeros(4, np.float32)), "expected a U8 vector"),
    ],
)
def test_broken_quant_state_blob_is_a_format_error(
    tmp_path: Path, build: Build, kit: Any, value: RawTensor, message: str
) -> None:
    tensors = four_bit(kit, nested=False)
    tensors[KEY + ".quant_state.bitsandbytes__nf4"] = value
    with pytest.raises(FormatError, match=message) as err:
        flexq.compose(build(tmp_path / "c", tensors), formats=FORMATS)
    assert "quant_state.bitsandbytes__nf4" in str(err.value)


def test_nested_tensors_without_nested_fields_are_an_error(
    tmp_path: Path, build: Build, kit: Any
) -> None:
    tensors = four_bit(kit, nested=False)
    tensors[KEY + ".nested_absmax"] = RawTensor("F32", np.ones(1, np.float32))
    with pytest.raises(FormatError, match="has no nested fields"):
        flexq.compose(build(tmp_path / "c", tensors), formats=FORMATS)


def test_orphaned_companions_are_reported_by_the_core(
    tmp_path: Path, build: Build, kit: Any
) -> None:
    tensors = four_bit(kit)
    tensors["model.norm.weight"] = RawTensor("F32", np.ones(4, np.float32))
    tensors["model.norm.weight.absmax"] = RawTensor("F32", np.ones(1, np.float32))
    tensors["model.x.SCB"] = RawTensor("F32", np.ones(1, np.float32))
    with pytest.raises(flexq.FlexqError, match=r"model\.x"):
        flexq.compose(build(tmp_path / "c", tensors, kit.config_4bit()), formats=FORMATS)
    del tensors["model.x.SCB"]
    with pytest.raises(flexq.FlexqError, match=r"model\.norm\.weight\.absmax"):
        flexq.compose(build(tmp_path / "c2", tensors, kit.config_4bit()), formats=FORMATS)


def test_quantized_looking_weight_without_its_state_is_an_error(
    tmp_path: Path, build: Build, kit: Any
) -> None:
    tensors = four_bit(kit)
    tensors["model.layers.0.mlp.down_proj.weight"] = RawTensor("U8", np.zeros((8, 1), np.uint8))
    with pytest.raises(FormatError, match="down_proj.weight.quant_state"):
        flexq.compose(build(tmp_path / "c", tensors, kit.config_4bit()), formats=FORMATS)
    int8 = {"m.weight": RawTensor("I8", np.zeros((2, 2), np.int8))}
    with pytest.raises(FormatError, match=r"'m\.SCB'"):
        flexq.compose(build(tmp_path / "c2", int8, kit.config_8bit()), formats=FORMATS)


def test_scb_without_an_int8_weight_is_an_error(tmp_path: Path, build: Build, kit: Any) -> None:
    cb, scb = kit.random_int8(np.random.default_rng(0), 2, 3)
    tensors = kit.tensors_int8("m", cb, scb)
    tensors["m.weight"] = RawTensor("F32", np.zeros((2, 3), np.float32))
    with pytest.raises(FormatError, match="expected I8"):
        flexq.compose(build(tmp_path / "c", tensors), formats=FORMATS)
    tensors = kit.tensors_int8("m", cb, scb)
    tensors["m.SCB"] = RawTensor("F32", np.ones(3, np.float32))
    with pytest.raises(FormatError, match=r"expected F32 \[2\]"):
        flexq.compose(build(tmp_path / "c2", tensors), formats=FORMATS)


@pytest.mark.parametrize(
    "skip",
    [
        {"llm_int8_skip_modules": ["q_proj"]},
        {"modules_to_not_convert": ["model.layers.0"]},
        {"llm_int8_skip_modules": ["model.layers.*.self_attn"]},
        {"llm_int8_skip_modules": ["re:model\\.layers\\.\\d+\\.self_attn"]},
    ],
)
def test_quantized_tensor_in_a_skipped_module_is_an_error(
    tmp_path: Path, build: Build, kit: Any, skip: dict[str, list[str]]
) -> None:
    with pytest.raises(FormatError, match="as not quantized"):
        flexq.compose(build(tmp_path / "c", four_bit(kit), kit.config_4bit(**skip)), FORMATS)


def test_skip_list_naming_other_modules_is_fine(tmp_path: Path, build: Build, kit: Any) -> None:
    config = kit.config_4bit(llm_int8_skip_modules=["lm_head", "k_proj"])
    ct = flexq.compose(build(tmp_path / "c", four_bit(kit), config), formats=FORMATS)
    assert ct.entries[KEY].owner == "bitsandbytes"


def test_malformed_config_field_is_a_format_error(tmp_path: Path, build: Build, kit: Any) -> None:
    config = kit.config_4bit(llm_int8_skip_modules="lm_head")
    with pytest.raises(FormatError, match="llm_int8_skip_modules"):
        flexq.compose(build(tmp_path / "c", four_bit(kit), config), formats=FORMATS)


def test_wrong_code_book_is_a_format_error_at_load(tmp_path: Path, build: Build, kit: Any) -> None:
    tensors = four_bit(kit)
    tensors[KEY + ".quant_map"] = RawTensor("F32", np.linspace(-1, 1, 16, dtype=np.float32))
    ct = flexq.compose(build(tmp_path / "c", tensors), formats=FORMATS)
    with pytest.raises(FormatError, match="not the nf4 code book"):
        ct.load(KEY, "float32")


def test_non_row_int8_weight_format_is_a_format_error(
    tmp_path: Path, build: Build, kit: Any
) -> None:
    cb, scb = kit.random_int8(np.random.default_rng(0), 2, 3)
    tensors = kit.tensors_int8("m", cb, scb)
    tensors["m.weight_format"] = RawTensor("U8", np.array(1, dtype=np.uint8))
    ct = flexq.compose(build(tmp_path / "c", tensors), formats=FORMATS)
    with pytest.raises(FormatError, match="row-major"):
        ct.load("m.weight", "float32")


@pytest.mark.parametrize(
    ("nested", "corrupt", "named"),
    [(False, "absmax", "absmax"), (True, "nested_absmax", "nested_absmax"),
     (True, "nested_map", "nested_quant_map")],
)  # fmt: skip
def test_non_finite_scales_are_declared_to_the_core(
    tmp_path: Path, build: Build, kit: Any, nested: bool, corrupt: str, named: str
) -> None:
    case = kit.random_4bit(np.random.default_rng(0), (4, 32), "nf4", 64, nested, 1)
    if corrupt == "nested_map":
        case["nested_map"][case["absmax"][1]] = np.inf
    else:
        case[corrupt][1] = np.nan
    ct = flexq.compose(build(tmp_path / "c", kit.tensors_4bit(KEY, case)), formats=FORMATS)
    plan = ct.plan(KEY, flexq.TargetSlice.whole((4, 32), "float32"))
    assert named in " ".join(plan.scales)
    with pytest.warns(flexq.ScaleWarning, match=named):
        out = ct.load(KEY, "float32")
    assert not np.isfinite(out.reshape(-1)[64:]).any()
    assert np.isfinite(out.reshape(-1)[:64]).all()


def test_int8_scb_is_a_declared_scale(tmp_path: Path, build: Build, kit: Any) -> None:
    cb, scb = kit.random_int8(np.random.default_rng(0), 3, 4)
    scb[2] = np.inf
    ct = flexq.compose(build(tmp_path / "c", kit.tensors_int8("m", cb, scb)), formats=FORMATS)
    with pytest.warns(flexq.ScaleWarning, match="SCB"):
        ct.load("m.weight", "float32")


def test_non_finite_nested_offset_is_a_format_error(tmp_path: Path, build: Build, kit: Any) -> None:
    state = {**STATE, "nested_blocksize": 256, "nested_dtype": "float32"}
    tensors = four_bit(kit)
    text = json.dumps({**state, "nested_offset": float("nan")}).encode()
    tensors[KEY + ".quant_state.bitsandbytes__nf4"] = RawTensor(
        "U8", np.frombuffer(text, np.uint8).copy()
    )
    with pytest.raises(FormatError, match="non-finite nested_offset"):
        flexq.compose(build(tmp_path / "c", tensors), formats=FORMATS)
