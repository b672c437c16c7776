"""Which tensors the mxfp4 format claims, recognizes, leaves alone, or rejects."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq import FormatError

FORMATS = ["mxfp4"]
Build = Callable[..., Path]
EXPERTS = "model.layers.0.mlp.experts.down_proj"
ATTN = "model.layers.0.self_attn.q_proj"


def u8(*shape: int) -> flexq.RawTensor:
    return flexq.RawTensor("U8", np.zeros(shape, dtype=np.uint8))


def experts() -> dict[str, flexq.RawTensor]:
    return {EXPERTS + "_blocks": u8(2, 4, 3, 16), EXPERTS + "_scales": u8(2, 4, 3)}


def test_hybrid_checkpoint_leaves_fp8_attention_to_the_fp8_format(
    tmp_path: Path, build: Build, gpt_oss_config: dict[str, Any], fake_fp8: str
) -> None:
    tensors = {
        **experts(),
        EXPERTS + "_bias": flexq.RawTensor("BF16", np.zeros((2, 4), dtype=np.uint16)),
        ATTN + ".weight": flexq.RawTensor("F8_E4M3", np.zeros((8, 8), dtype=np.uint8)),
        ATTN + ".weight_scale": u8(8, 1),  # a one-byte (E8M0-style) FP8 scale
    }
    path = build(tmp_path / "c", tensors, gpt_oss_config)
    ct = flexq.compose(path, formats=["mxfp4", fake_fp8])
    owners = {k: e.owner for k, e in ct.entries.items()}
    assert owners == {
        EXPERTS: "mxfp4",
        EXPERTS + "_bias": "passthrough",
        ATTN + ".weight": fake_fp8,
    }
    assert ct.entries[ATTN + ".weight"].sources == (ATTN + ".weight", ATTN + ".weight_scale")


def test_fp8_tensors_alone_are_not_claimed_or_recognized(tmp_path: Path, build: Build) -> None:
    tensors = {
        ATTN + ".weight": flexq.RawTensor("F8_E4M3", np.zeros((8, 8), dtype=np.uint8)),
        ATTN + ".weight_scale": flexq.RawTensor("F8_E8M0", np.zeros((8, 1), dtype=np.uint8)),
        "lone.weight_scale": u8(4),
    }
    ct = flexq.compose(build(tmp_path / "c", tensors), formats=FORMATS, strict=False)
    assert all(e.is_passthrough for e in ct.entries.values())
    # The F8 tensors are problems only because no FP8 format is active; none is called ours.
    assert len(ct.problems) == 2
    assert all("which no format in ['mxfp4'] decodes" in p for p in ct.problems)
    assert ct.entries["lone.weight_scale"].dtype == "uint8"


def test_blocks_without_scales_is_an_error_naming_the_tensor(tmp_path: Path, build: Build) -> None:
    path = build(tmp_path / "c", {EXPERTS + "_blocks": u8(2, 4, 3, 16)})
    with pytest.raises(FormatError, match=rf"{EXPERTS}_blocks.*mxfp4.*no scales.*_scales"):
        flexq.compose(path, formats=FORMATS)


def test_scales_without_blocks_is_an_orphan(tmp_path: Path, build: Build) -> None:
    path = build(tmp_path / "c", {EXPERTS + "_scales": u8(2, 4, 3)})
    with pytest.raises(FormatError, match=rf"{EXPERTS}_scales.*'mxfp4'.*orphaned"):
        flexq.compose(path, formats=FORMATS)


def test_mismatched_pair_shapes_are_an_error(tmp_path: Path, build: Build) -> None:
    path = build(
        tmp_path / "c", {EXPERTS + "_blocks": u8(2, 4, 3, 16), EXPERTS + "_scales": u8(2, 4, 2)}
    )
    with pytest.raises(FormatError, match=rf"model.safetensors.*{EXPERTS}_blocks.*\(2, 4, 2\)"):
        flexq.compose(path, formats=FORMATS)


def test_blocks_with_wide_scales_are_an_error(tmp_path: Path, build: Build) -> None:
    path = build(
        tmp_path / "c",
        {
            EXPERTS + "_blocks": u8(2, 4, 3, 16),
            EXPERTS + "_scales": flexq.RawTensor("BF16", np.zeros((2, 4, 3), dtype=np.uint16)),
        },
    )
    with pytest.raises(FormatError, match=r"scales .* are BF16"):
        flexq.compose(path, formats=FORMATS)


def test_pair_in_a_module_the_config_excludes_is_an_error(
    tmp_path: Path, build: Build, gpt_oss_config: dict[str, Any]
) -> None:
    key = "model.layers.3.self_attn.o_proj"
    path = build(
        tmp_path / "c", {key + "_blocks": u8(4, 1, 16), key + "_scales": u8(4, 1)}, gpt_oss_config
    )
    with pytest.raises(FormatError, match=r"o_proj_blocks.*model\.layers\.\*\.self_attn"):
        flexq.compose(path, formats=FORMATS)


def test_compressed_tensors_ignore_list_accepts_regexes(
    tmp_path: Path, build: Build, ct_config: dict[str, Any]
) -> None:
    config = {
        **ct_config,
        "quantization_config": {**ct_config["quantization_config"], "ignore": ["re:.*mlp\\.gate$"]},
    }
    tensors = {"m.mlp.gate.weight_packed": u8(4, 16), "m.mlp.gate.weight_scale": u8(4, 1)}
    with pytest.raises(FormatError, match=r"re:\.\*mlp"):
        flexq.compose(build(tmp_path / "c", tensors, config), formats=FORMATS)
    tensors = {"m.mlp.up.weight_packed": u8(4, 16), "m.mlp.up.weight_scale": u8(4, 1)}
    ct = flexq.compose(build(tmp_path / "d", tensors, config), formats=FORMATS)
    assert ct.entries["m.mlp.up.weight"].owner == "mxfp4"


def test_compressed_tensors_packed_without_scale_is_an_error_under_its_config(
    tmp_path: Path, build: Build, ct_config: dict[str, Any]
) -> None:
    path = build(tmp_path / "c", {"m.down.weight_packed": u8(4, 16)}, ct_config)
    with pytest.raises(FormatError, match=r"'m\.down\.weight_packed'.*no scale.*weight_scale"):
        flexq.compose(path, formats=FORMATS)


def test_compressed_tensors_pair_is_found_without_a_config(tmp_path: Path, build: Build) -> None:
    path = build(
        tmp_path / "c", {"m.down.weight_packed": u8(4, 48), "m.down.weight_scale": u8(4, 3)}
    )
    ct = flexq.compose(path, formats=FORMATS)
    assert ct.entries["m.down.weight"].shape == (4, 96)
    assert ct.entries["m.down.weight"].sources == ("m.down.weight_packed", "m.down.weight_scale")


def test_nvfp4_pairs_are_not_claimed(tmp_path: Path, build: Build) -> None:
    tensors = {
        "m.down.weight_packed": u8(4, 16),
        "m.down.weight_scale": flexq.RawTensor("F8_E4M3", np.zeros((4, 2), dtype=np.uint8)),
        "m.up.weight_packed": u8(4, 16),
        "m.up.weight_scale": u8(4, 1),
        "m.up.weight_global_scale": flexq.RawTensor.of(np.ones(1, dtype=np.float32)),
    }
    ct = flexq.compose(build(tmp_path / "c", tensors), formats=FORMATS, strict=False)
    assert all(e.is_passthrough for e in ct.entries.values())


def test_other_compressed_tensors_formats_leave_pairs_alone(
    tmp_path: Path, build: Build, ct_config: dict[str, Any]
) -> None:
    config = {
        "quantization_config": {
            **ct_config["quantization_config"],
            "format": "nvfp4-pack-quantized",
            "config_groups": {},
        }
    }
    tensors = {"m.up.weight_packed": u8(4, 16), "m.up.weight_scale": u8(4, 1)}
    path = build(tmp_path / "c", tensors, config)
    with pytest.raises(flexq.FormatError, match="nvfp4-pack-quantized"):
        flexq.compose(path, formats=FORMATS)
    ct = flexq.compose(path, formats=FORMATS, allow_unclaimed=True)
    assert ct.entries["m.up.weight_packed"].is_passthrough


def test_mixed_precision_config_groups_declare_mxfp4(
    tmp_path: Path, build: Build, ct_config: dict[str, Any]
) -> None:
    qc = {**ct_config["quantization_config"], "format": "mixed-precision"}
    qc["config_groups"] = {**qc["config_groups"], "group_1": {"format": "float-quantized"}}
    path = build(tmp_path / "c", {"m.down.weight_packed": u8(4, 16)}, {"quantization_config": qc})
    with pytest.raises(FormatError, match="no scale"):
        flexq.compose(path, formats=FORMATS)


def test_compressed_tensors_scale_grid_mismatch_is_an_error(tmp_path: Path, build: Build) -> None:
    path = build(
        tmp_path / "c", {"m.down.weight_packed": u8(4, 48), "m.down.weight_scale": u8(4, 2)}
    )
    with pytest.raises(FormatError, match=r"weight_packed.*96 elements.*\(4, 3\)"):
        flexq.compose(path, formats=FORMATS)


def test_components_in_different_shards_are_paired(
    tmp_path: Path, build: Build, gpt_oss_config: dict[str, Any]
) -> None:
    path = build(tmp_path / "c", experts(), gpt_oss_config, shard_of={EXPERTS + "_scales": 1})
    assert (path / "model.safetensors.index.json").exists()
    ct = flexq.compose(path, formats=FORMATS)
    assert ct.entries[EXPERTS].shape == (2, 96, 4)  # [E, in, out]
    assert ct.load(EXPERTS, "float32").shape == (2, 96, 4)
