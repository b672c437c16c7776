"""Which tensors the nvfp4 format claims, recognizes, leaves to other formats, or rejects."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq import FormatError

CT, MO = "compressed-tensors", "modelopt"
FORMATS = ["nvfp4"]
ALL = ["fp8", "mxfp4", "int4-awq", "nvfp4"]
Build = Callable[..., Path]
Nv = Callable[..., dict[str, flexq.RawTensor]]
DOWN = "model.layers.0.mlp.down_proj"
UP = "model.layers.0.mlp.up_proj"
Q = "model.layers.0.self_attn.q_proj"


def codes(rows: int = 4, n: int = 32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.zeros((rows, n // 2), np.uint8),
        np.full((rows, -(-n // 16)), 0x38, np.uint8),
        np.ones((1,), np.float32),
    )


def f32(*shape: int) -> flexq.RawTensor:
    return flexq.RawTensor("F32", np.ones(shape, np.float32))


def owners(path: Path, formats: list[str] | None = None) -> dict[str, str]:
    return {k: e.owner for k, e in flexq.compose(path, formats).entries.items()}


@pytest.mark.parametrize("producer", [CT, MO])
def test_every_installed_format_leaves_nvfp4_to_nvfp4(
    tmp_path: Path, build: Build, nv: Nv, configs: dict[str, Any], producer: str
) -> None:
    act = ".input_global_scale" if producer == CT else ".input_scale"
    tensors = {
        **nv(producer, DOWN, *codes()),
        DOWN + act: f32(1),
        "lm_head.weight": flexq.RawTensor("BF16", np.zeros((8, 32), np.uint16)),
    }
    path = build(tmp_path / "c", tensors, configs[producer])
    ct = flexq.compose(path, ALL)
    assert {k: e.owner for k, e in ct.entries.items()} == {
        DOWN + ".weight": "nvfp4",
        DOWN + act: "passthrough",  # activation scales pass through, never claimed
        "lm_head.weight": "passthrough",
    }
    entry = ct.entries[DOWN + ".weight"]
    assert entry.shape == (4, 32)
    assert entry.dtype == "bfloat16"


def test_compressed_tensors_mixed_checkpoint_gives_each_tensor_its_owner(
    tmp_path: Path, build: Build, nv: Nv
) -> None:
    """NVFP4, MXFP4 and FP8 linears in one compressed-tensors checkpoint, all formats installed."""
    group = {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float"}}
    config = {
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "mixed-precision",
            "config_groups": {
                "g0": {**group, "format": "nvfp4-pack-quantized"},
                "g1": {**group, "format": "mxfp4-pack-quantized"},
                "g2": {
                    "targets": ["re:.*q_proj"],
                    "format": "float-quantized",
                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                },
            },
        },
    }
    tensors = {
        **nv(CT, DOWN, *codes()),
        UP + ".weight_packed": flexq.RawTensor("U8", np.zeros((4, 16), np.uint8)),
        UP + ".weight_scale": flexq.RawTensor("U8", np.full((4, 1), 127, np.uint8)),
        Q + ".weight": flexq.RawTensor("F8_E4M3", np.zeros((4, 32), np.uint8)),
        Q + ".weight_scale": f32(4, 1),
    }
    assert owners(build(tmp_path / "c", tensors, config), ALL) == {
        DOWN + ".weight": "nvfp4",
        UP + ".weight": "mxfp4",
        Q + ".weight": "fp8",
    }


def test_modelopt_mixed_precision_leaves_fp8_layers_to_fp8(
    tmp_path: Path, build: Build, nv: Nv
) -> None:
    config = {
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "MIXED_PRECISION",
            "quantized_layers": {
                DOWN: {"quant_algo": "NVFP4", "group_size": 16},
                Q: {"quant_algo": "FP8"},
            },
        }
    }
    tensors = {
        **nv(MO, DOWN, *codes()),
        DOWN + ".input_scale": f32(),
        Q + ".weight": flexq.RawTensor("F8_E4M3", np.zeros((4, 32), np.uint8)),
        Q + ".weight_scale": f32(),
        Q + ".input_scale": f32(),
    }
    assert owners(build(tmp_path / "c", tensors, config), ALL) == {
        DOWN + ".weight": "nvfp4",
        DOWN + ".input_scale": "passthrough",
        Q + ".weight": "fp8",
        Q + ".input_scale": "passthrough",
    }


def test_modelopt_hf_quant_config_alone_is_read(tmp_path: Path, build: Build, nv: Nv) -> None:
    """Older ModelOpt exports keep the settings only in hf_quant_config.json."""
    tensors = {**nv(MO, DOWN, *codes()), **nv(MO, "lm_head", *codes())}
    path = build(tmp_path / "c", tensors, {"torch_dtype": "float16"})
    quantization: dict[str, Any] = {
        "quant_algo": "NVFP4",
        "group_size": 16,
        "exclude_modules": ["lm_head"],
    }
    doc = {"producer": {"name": "modelopt", "version": "0.27.0"}, "quantization": quantization}
    (path / "hf_quant_config.json").write_text(json.dumps(doc))
    with pytest.raises(
        FormatError, match=r"'lm_head\.weight'.*hf_quant_config\.json.*exclude_modules"
    ):
        flexq.compose(path, FORMATS)
    quantization["exclude_modules"] = ["model.embed_tokens"]
    (path / "hf_quant_config.json").write_text(json.dumps(doc))
    ct = flexq.compose(path, FORMATS)
    assert set(ct.entries) == {DOWN + ".weight", "lm_head.weight"}
    assert ct.entries[DOWN + ".weight"].dtype == "float16"


def test_auto_round_format_is_claimed_with_its_own_math(
    tmp_path: Path, build: Build, nv: Nv, configs: dict[str, Any]
) -> None:
    tensors = {**nv("auto-round", DOWN, *codes()), DOWN + ".input_global_scale": f32(1)}
    path = build(tmp_path / "c", tensors, configs["auto-round"])
    ct = flexq.compose(path, ALL)
    assert {k: e.owner for k, e in ct.entries.items()} == {
        DOWN + ".weight": "nvfp4",
        DOWN + ".input_global_scale": "passthrough",
    }
    from flexq_nvfp4.detect import analyze

    assert analyze(ct.checkpoint).tensors[DOWN + ".weight"].producer == "auto-round"


def test_triples_without_any_config_are_claimed_by_their_tensors(
    tmp_path: Path, build: Build, nv: Nv
) -> None:
    tensors = {**nv(CT, DOWN, *codes()), **nv(MO, UP, *codes())}
    assert owners(build(tmp_path / "c", tensors), ALL) == {
        DOWN + ".weight": "nvfp4",
        UP + ".weight": "nvfp4",
    }


def test_other_formats_tensors_are_never_claimed(tmp_path: Path, build: Build) -> None:
    tensors = {
        # MXFP4's compressed-tensors pair: U8 E8M0 scale, no global scale
        UP + ".weight_packed": flexq.RawTensor("U8", np.zeros((4, 16), np.uint8)),
        UP + ".weight_scale": flexq.RawTensor("U8", np.zeros((4, 1), np.uint8)),
        # INT4 pack-quantized codes
        Q + ".weight_packed": flexq.RawTensor("I32", np.zeros((4, 4), np.int32)),
        Q + ".weight_scale": flexq.RawTensor("BF16", np.zeros((4, 1), np.uint16)),
        # FP8 weight with an F32 scale, and a plain U8 tensor
        DOWN + ".weight": flexq.RawTensor("F8_E4M3", np.zeros((4, 32), np.uint8)),
        DOWN + ".weight_scale": f32(),
        "model.mask.weight": flexq.RawTensor("U8", np.zeros((4,), np.uint8)),
    }
    path = build(tmp_path / "c", tensors)
    found = flexq.compose(path, ["nvfp4"], strict=False)
    assert all(e.is_passthrough for e in found.entries.values())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"drop": ".weight_global_scale"},
            r"no global scale tensor '.*down_proj\.weight_global_scale'",
        ),
        ({"drop": ".weight_scale"}, r"no block scale tensor '.*down_proj\.weight_scale'"),
        (
            {"scale": flexq.RawTensor("F32", np.ones((4, 2), np.float32))},
            r"is F32, expected F8_E4M3",
        ),
        ({"global": flexq.RawTensor("BF16", np.ones((1,), np.uint16))}, r"is BF16 of shape \(1,\)"),
        (
            {"global": flexq.RawTensor("F32", np.ones((2,), np.float32))},
            r"of shape \(2,\), expected one",
        ),
        (
            {"scale": flexq.RawTensor("F8_E4M3", np.ones((4, 3), np.uint8))},
            r"has shape \(4, 3\); expected \(4, 2\)",
        ),
        (
            {"packed": flexq.RawTensor("I8", np.zeros((4, 16), np.int8))},
            r"has dtype I8; NVFP4 codes are U8",
        ),
    ],
)
def test_broken_compressed_tensors_triples_name_file_tensor_and_format(
    tmp_path: Path,
    build: Build,
    nv: Nv,
    configs: dict[str, Any],
    change: dict[str, Any],
    message: str,
) -> None:
    tensors = nv(CT, DOWN, *codes())
    if "drop" in change:
        del tensors[DOWN + change["drop"]]
    for part, suffix in (
        ("scale", ".weight_scale"),
        ("global", ".weight_global_scale"),
        ("packed", ".weight_packed"),
    ):
        if part in change:
            tensors[DOWN + suffix] = change[part]
    path = build(tmp_path / "c", tensors, configs[CT])
    with pytest.raises(FormatError, match=message) as err:
        flexq.compose(path, ALL)
    assert "model.safetensors" in str(err.value)
    assert "nvfp4" in str(err.value)


def test_packed_weight_without_scales_is_an_error_when_the_config_declares_only_nvfp4(
    tmp_path: Path, build: Build, configs: dict[str, Any]
) -> None:
    tensors = {DOWN + ".weight_packed": flexq.RawTensor("U8", np.zeros((4, 16), np.uint8))}
    with pytest.raises(FormatError, match=r"declares only 'nvfp4-pack-quantized'"):
        flexq.compose(build(tmp_path / "c", tensors, configs[CT]), FORMATS)


def test_modelopt_codes_without_scale_2_are_an_error(
    tmp_path: Path, build: Build, nv: Nv, configs: dict[str, Any]
) -> None:
    tensors = nv(MO, DOWN, *codes())
    del tensors[DOWN + ".weight_scale_2"]
    with pytest.raises(FormatError, match=r"modelopt layout\) has no global scale tensor"):
        flexq.compose(build(tmp_path / "c", tensors, configs[MO]), ALL)


def test_modelopt_algorithm_that_is_not_nvfp4_is_an_error(
    tmp_path: Path, build: Build, nv: Nv, configs: dict[str, Any]
) -> None:
    config = copy.deepcopy(configs[MO])
    config["quantization_config"]["quant_algo"] = "NVFP4_AWQ"
    with pytest.raises(FormatError, match=r"quant_algo 'NVFP4_AWQ'"):
        flexq.compose(build(tmp_path / "c", nv(MO, DOWN, *codes()), config), FORMATS)


@pytest.mark.parametrize(
    ("producer", "module"),
    [(CT, "lm_head"), (CT, "model.layers.0.mlp.gate"), (MO, "model.layers.1.self_attn.o_proj")],
)
def test_nvfp4_tensor_in_an_ignored_module_is_an_error(
    tmp_path: Path, build: Build, nv: Nv, configs: dict[str, Any], producer: str, module: str
) -> None:
    path = build(tmp_path / "c", nv(producer, module, *codes()), configs[producer])
    with pytest.raises(FormatError, match=rf"{module}.*lists .* as not quantized"):
        flexq.compose(path, FORMATS)


def test_ignore_regex_matches_from_the_start_only(
    tmp_path: Path, build: Build, nv: Nv, configs: dict[str, Any]
) -> None:
    # "re:.*mlp\.gate$" must not catch gate_proj
    path = build(tmp_path / "c", nv(CT, "model.layers.0.mlp.gate_proj", *codes()), configs[CT])
    assert set(flexq.compose(path, FORMATS).entries) == {"model.layers.0.mlp.gate_proj.weight"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {
                "quant_method": "compressed-tensors",
                "format": "nvfp4-pack-quantized",
                "config_groups": {
                    "g": {"format": "nvfp4-pack-quantized", "weights": {"group_size": 32}}
                },
            },
            r"config_groups\.g\.weights\.group_size is 32",
        ),
        (
            {"quant_method": "compressed-tensors", "ignore": "lm_head"},
            r"quantization_config\.ignore: Input should be a valid list",
        ),
        ({"quant_method": "modelopt"}, r"quantization_config\.quant_algo: Field required"),
        (
            {"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "ignore": "x"}},
            r"quantization_config\.quantization\.ignore: Input should be a valid list",
        ),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 8}, r"group_size is 8"),
        (
            {"quant_method": "auto-round", "data_type": "nv_fp", "group_size": 32},
            r"quantization_config\.group_size is 32",
        ),
    ],
)
def test_malformed_config_fields_are_named(
    tmp_path: Path, build: Build, nv: Nv, config: dict[str, Any], message: str
) -> None:
    path = build(tmp_path / "c", nv(CT, DOWN, *codes()), {"quantization_config": config})
    with pytest.raises(FormatError, match=message) as err:
        flexq.compose(path, FORMATS)
    assert "config.json: quantization_config" in str(err.value)


def test_malformed_hf_quant_config_names_the_file(tmp_path: Path, build: Build, nv: Nv) -> None:
    path = build(tmp_path / "c", nv(MO, DOWN, *codes()))
    (path / "hf_quant_config.json").write_text("{not json")
    with pytest.raises(
        FormatError, match=r"hf_quant_config\.json \(format 'nvfp4'\): not valid JSON"
    ):
        flexq.compose(path, FORMATS)
    doc = {"quantization": {"quant_algo": "NVFP4", "exclude_modules": "lm_head"}}
    (path / "hf_quant_config.json").write_text(json.dumps(doc))
    with pytest.raises(
        FormatError, match=r"hf_quant_config\.json: quantization\.exclude_modules: Input should"
    ):
        flexq.compose(path, FORMATS)
    (path / "hf_quant_config.json").write_text(json.dumps({"quant_algo": "NVFP4"}))
    with pytest.raises(
        FormatError, match=r"hf_quant_config\.json: quantization: missing or not an object"
    ):
        flexq.compose(path, FORMATS)


@pytest.mark.parametrize("key", [DOWN + ".weight_global_scale", DOWN + ".weight_scale_2"])
def test_a_global_scale_without_its_weight_is_an_orphan(
    tmp_path: Path, build: Build, key: str
) -> None:
    path = build(tmp_path / "c", {key: f32(1)})
    with pytest.raises(FormatError, match=rf"{key}.*format 'nvfp4'.*orphaned"):
        flexq.compose(path, ALL)
