"""The one model of compressed-tensors configs, read by the core's detection and by every
format that decodes compressed-tensors checkpoints (ct-int, fp8, mxfp4, nvfp4).

The configs in ``tests/data/llmcompressor-configs`` are the ``quantization_config`` of
the checkpoints the interop producers wrote (llm-compressor 0.14.0.1 with
compressed-tensors 0.19.0 on CPU, ``interop/producers/llmcompressor_schemes.py``): one per
scheme. Every reader must find the same declared formats and the same scheme in each;
a format no installed format claims stays an error (DESIGN 8).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq import Checkpoint, FormatError, RawTensor, save_checkpoint
from flexq.formatkit import CtConfig, read_compressed_tensors
from flexq.plugin.known import config_methods

CONFIGS = Path(__file__).parent / "data" / "llmcompressor-configs"

#: producer scheme -> (the declared format, the weights' (bits, type, strategy,
#: group_size, block_structure, symmetric, group act-order), the format that decodes it).
PRESETS: dict[str, tuple[str, tuple[Any, ...], str]] = {
    "W4A16-g32": ("pack-quantized", (4, "int", "group", 32, None, True, False), "ct-int"),
    "W4A16_ASYM": ("pack-quantized", (4, "int", "group", 128, None, False, False), "ct-int"),
    # actorder "weight" reorders during GPTQ and writes no g_idx: not group act-order.
    "GPTQ-W4A16-actorder": (
        "pack-quantized",
        (4, "int", "group", 64, None, True, False),
        "ct-int",
    ),
    "W8A16": ("pack-quantized", (8, "int", "group", 128, None, True, False), "ct-int"),
    "W8A8": ("int-quantized", (8, "int", "channel", None, None, True, False), "ct-int"),
    "FP8": ("float-quantized", (8, "float", "tensor", None, None, True, False), "fp8"),
    "FP8_DYNAMIC": ("float-quantized", (8, "float", "channel", None, None, True, False), "fp8"),
    "FP8_BLOCK": ("float-quantized", (8, "float", "block", None, [128, 128], True, False), "fp8"),
    "MXFP4A16": ("mxfp4-pack-quantized", (4, "float", "group", 32, None, True, False), "mxfp4"),
    "MXFP8A16": ("mxfp8-quantized", (8, "float", "group", 32, None, True, False), "fp8"),
    "NVFP4A16": (
        "nvfp4-pack-quantized",
        (4, "float", "tensor_group", 16, None, True, False),
        "nvfp4",
    ),
}


def producer_config(name: str) -> dict[str, Any]:
    """The ``quantization_config`` llm-compressor wrote for scheme ``name`` (a fresh copy)."""
    config: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return copy.deepcopy(config)


def test_every_kept_producer_config_has_its_expectations() -> None:
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == sorted(PRESETS)


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
    fmt, weights, _ = PRESETS[name]
    qc = producer_config(name)
    config = model_of(tmp_path, qc)
    assert config.declared_formats == {fmt}
    assert config_methods(qc) == {f"compressed-tensors/{fmt}"}
    scheme = config.scheme_for("model.layers.0.self_attn.q_proj")
    assert scheme is not None
    assert (scheme.group, scheme.format) == ("group_0", fmt)
    w = scheme.weights
    assert w is not None
    assert (w.num_bits, w.type, w.resolved_strategy(), w.group_size) == weights[:4]
    assert (w.block_structure, w.symmetric, w.act_order) == weights[4:]
    assert config.ignored_by("lm_head") == "lm_head"
    assert config.ignored_by("model.layers.0.mlp.down_proj") is None


@pytest.mark.parametrize("name", PRESETS)
def test_every_format_reads_the_same_declared_formats(tmp_path: Path, name: str) -> None:
    """ct-int, fp8, mxfp4 and nvfp4 read one model, so one config means one thing to all."""
    from flexq_ct_int.config import read_config as ct_int_config
    from flexq_fp8.config import read_config as fp8_config
    from flexq_mxfp4.config import read_config as mxfp4_config
    from flexq_nvfp4.config import read_config as nvfp4_config

    fmt, weights, _ = PRESETS[name]
    ckpt = Checkpoint(checkpoint_with(tmp_path, producer_config(name)))
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
    fmt, _, owner = PRESETS[name]
    claimers = {
        row.name for row in flexq.list_formats() if f"compressed-tensors/{fmt}" in row.methods
    }
    assert claimers == {owner}


def test_dense_is_a_declared_format_that_names_no_decoder(tmp_path: Path) -> None:
    qc = producer_config("W4A16-g32")
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
    qc = producer_config("FP8_DYNAMIC")
    del qc["config_groups"]["group_0"]["format"]
    config = model_of(tmp_path, qc)
    assert config.declared_formats == {"float-quantized"}
    assert [n for n, _ in config.groups_of("float-quantized")] == ["group_0"]


def test_a_config_naming_no_format_names_the_method_alone() -> None:
    assert config_methods({"quant_method": "compressed-tensors"}) == {"compressed-tensors"}


def test_a_format_no_installed_format_claims_is_an_error(tmp_path: Path) -> None:
    qc = producer_config("W4A16-g32")
    qc["format"] = qc["config_groups"]["group_0"]["format"] = "marlin-24"
    path = checkpoint_with(tmp_path, qc)
    with pytest.raises(FormatError, match=r"'compressed-tensors/marlin-24'.*no format"):
        flexq.compose(path)


def test_a_malformed_group_is_an_error_naming_file_field_and_reader(tmp_path: Path) -> None:
    qc = producer_config("W4A16-g32")
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
    qc = producer_config("W4A16-g32")
    qc["config_groups"]["group_0"]["targets"] = ["re:(unclosed"]
    with pytest.raises(FormatError, match=r"'re:\(unclosed' is not a valid regular expression"):
        model_of(tmp_path, qc)
