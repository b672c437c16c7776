"""The one model of compressed-tensors configs, read by the core's detection and by every
format that decodes compressed-tensors checkpoints (ct-int, fp8, mxfp4, nvfp4).

The configs are the shapes llm-compressor 0.14 / compressed-tensors 0.19 write for the
presets the interop producers run (``QuantizationModifier(targets="Linear", scheme=...,
ignore=["lm_head"])``): the preset's ``QuantizationArgs`` serialized with every field, as in
the NVFP4A16 export kept in ``packages/format-nvfp4/tests/data/llmcompressor-nvfp4a16``
(which is parsed too). Every reader must find the same declared formats and the same
scheme; a format no installed format claims stays an error (DESIGN 8).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq import Checkpoint, FormatError, RawTensor, save_checkpoint
from flexq.formatkit import CtConfig, read_compressed_tensors
from flexq.plugin.known import config_methods

NVFP4A16_EXPORT = (
    Path(__file__).parents[1]
    / "packages/format-nvfp4/tests/data/llmcompressor-nvfp4a16/config.json"
)


def args(num_bits: int, type_: str, strategy: str, **kw: Any) -> dict[str, Any]:
    """One serialized ``QuantizationArgs`` (compressed-tensors 0.19 writes every field)."""
    base: dict[str, Any] = {
        "actorder": None,
        "block_structure": None,
        "dynamic": False,
        "group_size": None,
        "num_bits": num_bits,
        "observer": "memoryless_minmax",
        "observer_kwargs": {},
        "scale_dtype": None,
        "strategy": strategy,
        "symmetric": True,
        "type": type_,
        "zp_dtype": None,
    }
    return base | kw


def preset(
    fmt: str, weights: dict[str, Any], inputs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``quantization_config`` of one preset over ``Linear``, ``lm_head`` ignored."""
    group = {
        "format": fmt,
        "input_activations": inputs,
        "output_activations": None,
        "targets": ["Linear"],
        "weights": weights,
    }
    return {
        "config_groups": {"group_0": group},
        "format": fmt,
        "global_compression_ratio": None,
        "ignore": ["lm_head"],
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
        "sparsity_config": {},
        "transform_config": {},
        "version": "0.19.0",
    }


E8M0 = {"scale_dtype": "torch.uint8", "zp_dtype": "torch.uint8"}
#: preset -> (its config, the declared format, the weights' (bits, type, strategy,
#: group_size, block_structure, symmetric), the format that decodes it).
PRESETS: dict[str, tuple[dict[str, Any], str, tuple[Any, ...], str]] = {
    "W4A16": (
        preset("pack-quantized", args(4, "int", "group", group_size=128)),
        "pack-quantized",
        (4, "int", "group", 128, None, True),
        "ct-int",
    ),
    "W4A16_ASYM": (
        preset("pack-quantized", args(4, "int", "group", group_size=128, symmetric=False)),
        "pack-quantized",
        (4, "int", "group", 128, None, False),
        "ct-int",
    ),
    "W8A8": (
        preset(
            "int-quantized",
            args(8, "int", "channel"),
            args(8, "int", "token", dynamic=True, observer=None),
        ),
        "int-quantized",
        (8, "int", "channel", None, None, True),
        "ct-int",
    ),
    "FP8": (
        preset(
            "float-quantized",
            args(8, "float", "tensor"),
            args(8, "float", "tensor", observer="static_minmax"),
        ),
        "float-quantized",
        (8, "float", "tensor", None, None, True),
        "fp8",
    ),
    "FP8_DYNAMIC": (
        preset(
            "float-quantized",
            args(8, "float", "channel"),
            args(8, "float", "token", dynamic=True, observer=None),
        ),
        "float-quantized",
        (8, "float", "channel", None, None, True),
        "fp8",
    ),
    "W8A8-FP8_BLOCK": (
        preset(
            "float-quantized",
            args(8, "float", "block", block_structure=[128, 128]),
            args(8, "float", "group", group_size=128, dynamic=True, observer=None),
        ),
        "float-quantized",
        (8, "float", "block", None, [128, 128], True),
        "fp8",
    ),
    "MXFP4A16": (
        preset("mxfp4-pack-quantized", args(4, "float", "group", group_size=32, **E8M0)),
        "mxfp4-pack-quantized",
        (4, "float", "group", 32, None, True),
        "mxfp4",
    ),
    "MXFP8A16": (
        preset("mxfp8-quantized", args(8, "float", "group", group_size=32, **E8M0)),
        "mxfp8-quantized",
        (8, "float", "group", 32, None, True),
        "fp8",
    ),
    "NVFP4A16": (
        json.loads(NVFP4A16_EXPORT.read_text())["quantization_config"],
        "nvfp4-pack-quantized",
        (4, "float", "tensor_group", 16, None, True),
        "nvfp4",
    ),
}


def checkpoint_with(
    tmp_path: Path, qc: dict[str, Any], tensors: dict[str, RawTensor] | None = None
) -> Path:
    plain = {"model.norm.weight": RawTensor.of(np.ones(4, np.float32))}
    return save_checkpoint(tmp_path / "ckpt", tensors or plain, config={"quantization_config": qc})


def model_of(tmp_path: Path, qc: dict[str, Any]) -> CtConfig:
    config = read_compressed_tensors(Checkpoint(checkpoint_with(tmp_path, qc)), "test")
    assert config is not None
    return config


@pytest.mark.parametrize("name", PRESETS)
def test_each_producer_config_gives_its_declared_format_and_scheme(
    tmp_path: Path, name: str
) -> None:
    qc, fmt, weights, _ = PRESETS[name]
    config = model_of(tmp_path, qc)
    assert config.declared_formats == {fmt}
    assert config_methods(qc) == {f"compressed-tensors/{fmt}"}
    scheme = config.scheme_for("model.layers.0.self_attn.q_proj")
    assert scheme is not None
    assert (scheme.group, scheme.format) == ("group_0", fmt)
    w = scheme.weights
    assert w is not None
    assert (w.num_bits, w.type, w.resolved_strategy(), w.group_size) == weights[:4]
    assert (w.block_structure, w.symmetric, w.act_order) == (*weights[4:], False)
    assert config.ignored_by("lm_head") == "lm_head"
    assert config.ignored_by("model.layers.0.mlp.down_proj") is None


@pytest.mark.parametrize("name", PRESETS)
def test_every_format_reads_the_same_declared_formats(tmp_path: Path, name: str) -> None:
    """ct-int, fp8, mxfp4 and nvfp4 read one model, so one config means one thing to all."""
    from flexq_ct_int.config import read_config as ct_int_config
    from flexq_fp8.config import read_config as fp8_config
    from flexq_mxfp4.config import read_config as mxfp4_config
    from flexq_nvfp4.config import read_config as nvfp4_config

    qc, fmt, weights, _ = PRESETS[name]
    ckpt = Checkpoint(checkpoint_with(tmp_path, qc))
    ct_int = ct_int_config(ckpt)
    assert ct_int is not None
    assert ct_int.declared_formats == mxfp4_config(ckpt).ct_formats == {fmt}
    assert nvfp4_config(ckpt).ct_formats == {fmt}
    # fp8 takes the block sizes of its own groups only (FP8 weights), from the same scheme.
    fp8 = fp8_config(ckpt).candidates
    blocks = {"tensor": (None, None), "channel": (1, None), "group": (1, weights[3])}
    if fmt in ("float-quantized", "mxfp8-quantized"):
        expected = tuple(weights[4]) if weights[2] == "block" else blocks[weights[2]]
        assert fp8 == (expected,)
    else:
        assert fp8 is None


@pytest.mark.parametrize("name", PRESETS)
def test_each_declared_format_is_claimed_by_the_format_that_decodes_it(name: str) -> None:
    _, fmt, _, owner = PRESETS[name]
    claimers = {
        row.name for row in flexq.list_formats() if f"compressed-tensors/{fmt}" in row.methods
    }
    assert claimers == {owner}


def test_dense_is_a_declared_format_that_names_no_decoder(tmp_path: Path) -> None:
    qc = preset("pack-quantized", args(4, "int", "group", group_size=128))
    qc["format"] = "mixed-precision"
    qc["config_groups"]["plain"] = {"format": "dense", "targets": ["re:.*lm_head$"]}
    config = model_of(tmp_path, qc)
    assert config.declared_formats == {"pack-quantized", "dense"}
    assert config.quantized_formats == {"pack-quantized"}
    assert config_methods(qc) == {"compressed-tensors/pack-quantized"}
    dense = config.scheme_for("model.lm_head")
    assert dense is not None
    assert (dense.group, dense.format, dense.weights) == ("plain", "dense", None)
    only_dense = {"quant_method": "compressed-tensors", "format": "dense"}
    assert config_methods(only_dense) == set()
    # A dense checkpoint of plain weights loads as it is: no format is asked for.
    ct = flexq.compose(checkpoint_with(tmp_path, only_dense))
    assert ct.entries["model.norm.weight"].is_passthrough


def test_a_group_without_a_format_takes_the_top_level_one(tmp_path: Path) -> None:
    qc = preset("float-quantized", args(8, "float", "channel"))
    del qc["config_groups"]["group_0"]["format"]
    config = model_of(tmp_path, qc)
    assert config.declared_formats == {"float-quantized"}
    assert [n for n, _ in config.groups_of("float-quantized")] == ["group_0"]


def test_a_config_naming_no_format_names_the_method_alone() -> None:
    assert config_methods({"quant_method": "compressed-tensors"}) == {"compressed-tensors"}


def test_a_format_no_installed_format_claims_is_an_error(tmp_path: Path) -> None:
    qc = preset("marlin-24", args(4, "int", "group", group_size=128))
    path = checkpoint_with(tmp_path, qc)
    with pytest.raises(FormatError, match=r"'compressed-tensors/marlin-24'.*no format"):
        flexq.compose(path)


def test_a_malformed_group_is_an_error_naming_file_field_and_reader(tmp_path: Path) -> None:
    qc = preset("pack-quantized", args(4, "int", "group", group_size=128))
    qc["config_groups"]["group_0"]["weights"]["num_bits"] = "4"
    path = checkpoint_with(tmp_path, qc)
    with pytest.raises(FormatError) as err:
        read_compressed_tensors(Checkpoint(path), "ct-int")
    message = str(err.value)
    assert str(path / "config.json") in message
    assert "config_groups.group_0.weights.num_bits" in message
    assert "format 'ct-int'" in message
    with pytest.raises(FormatError, match="config_groups.group_0.weights.num_bits"):
        config_methods(qc)


def test_a_bad_target_pattern_is_an_error(tmp_path: Path) -> None:
    qc = preset("pack-quantized", args(4, "int", "group", group_size=128))
    qc["config_groups"]["group_0"]["targets"] = ["re:(unclosed"]
    with pytest.raises(FormatError, match=r"'re:\(unclosed' is not a valid regular expression"):
        model_of(tmp_path, qc)
