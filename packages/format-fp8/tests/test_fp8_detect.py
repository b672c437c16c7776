"""Which tensors the fp8 format claims, which it leaves alone, and the errors it raises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq import FormatError, RawTensor
from flexq_fp8.detect import analyze

F8 = "F8_E4M3"


def f8(rows: int = 16, cols: int = 8) -> RawTensor:
    return RawTensor(F8, (np.arange(rows * cols) % 120).astype(np.uint8).reshape(rows, cols))


def f32(*shape: int, value: float = 0.5) -> RawTensor:
    return RawTensor.of(np.full(shape, value, dtype=np.float32))


def bf16(*shape: int) -> RawTensor:
    return RawTensor("BF16", np.full(shape, 0x3F80, dtype=np.uint16))


def save(path: Path, tensors: dict[str, RawTensor], qc: dict[str, Any] | None = None) -> Path:
    config = None if qc is None else {"torch_dtype": "bfloat16", "quantization_config": qc}
    return flexq.save_checkpoint(path, tensors, config=config)


def owners(path: Path) -> dict[str, str | None]:
    return {k: e.owner for k, e in flexq.compose(path, formats=["fp8"]).entries.items()}


def test_f8_weight_without_scale_is_an_error_naming_file_tensor_and_format(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": f8()})
    with pytest.raises(FormatError, match=r"model\.safetensors: tensor 'a\.weight'.*fp8"):
        flexq.compose(tmp_path, formats=["fp8"])


def test_block_scale_without_its_weight_is_reported_as_orphan(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": f8(), "a.weight_scale": f32(), "b.weight_scale_inv": f32(1, 1)})
    with pytest.raises(FormatError, match=r"'b\.weight_scale_inv' belongs to format 'fp8'.*orphan"):
        flexq.compose(tmp_path, formats=["fp8"])
    problems = flexq.compose(tmp_path, formats=["fp8"], strict=False).problems
    assert len(problems) == 1
    assert "b.weight_scale_inv" in problems[0]


def test_weight_scale_beside_a_bf16_weight_is_reported_as_orphan(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": bf16(4, 4), "a.weight_scale": f32()})
    problems = flexq.compose(tmp_path, formats=["fp8"], strict=False).problems
    assert len(problems) == 1
    assert "'a.weight_scale' belongs to format 'fp8'" in problems[0]


def test_weight_with_two_scales_is_an_error(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": f8(), "a.weight_scale": f32(), "a.weight_scale_inv": f32(1, 1)})
    with pytest.raises(FormatError, match=r"'a\.weight' has two scales"):
        flexq.compose(tmp_path, formats=["fp8"])


def test_fp8_weight_with_a_zero_point_is_an_error(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": f8(), "a.weight_scale": f32(), "a.weight_zero_point": f32()})
    with pytest.raises(FormatError, match=r"'a\.weight_zero_point': asymmetric FP8.*fp8"):
        flexq.compose(tmp_path, formats=["fp8"])


def test_scale_of_an_integer_dtype_is_an_error(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": f8(), "a.weight_scale": RawTensor.of(np.ones((16, 1), np.int32))})
    with pytest.raises(FormatError, match=r"tensor 'a\.weight_scale'.*dtype I32.*fp8"):
        flexq.compose(tmp_path, formats=["fp8"])


def test_scale_grid_that_contradicts_weight_block_size_is_an_error(tmp_path: Path) -> None:
    # 300 x 260 in 64x64 blocks is a 5x5 grid; the config says 128x128 (3x3).
    save(
        tmp_path,
        {"a.weight": f8(300, 260), "a.weight_scale_inv": f32(5, 5)},
        {"quant_method": "fp8", "weight_block_size": [128, 128]},
    )
    with pytest.raises(FormatError, match=r"'a\.weight_scale_inv'.*grid \(5, 5\).*128x128"):
        flexq.compose(tmp_path, formats=["fp8"])


def test_scale_grid_no_block_size_can_produce_is_an_error(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": f8(10, 8), "a.weight_scale_inv": f32(6, 1)})
    with pytest.raises(FormatError, match=r"no block size splits 10 elements into 6"):
        flexq.compose(tmp_path, formats=["fp8"])


def test_per_tensor_scale_is_accepted_under_a_block_config(tmp_path: Path) -> None:
    save(
        tmp_path,
        {"a.weight": f8(300, 260), "a.weight_scale": f32(value=2.0)},
        {"quant_method": "fp8", "weight_block_size": [128, 128]},
    )
    assert analyze(flexq.Checkpoint(tmp_path)).tensors["a.weight"].block == (300, 260)


@pytest.mark.parametrize(
    "qc",
    [
        {"quant_method": "fp8", "weight_block_size": [128]},
        {"quant_method": "fp8", "weight_block_size": [128, 0]},
        {"quant_method": "fp8", "weight_block_size": "128x128"},
    ],
)
def test_malformed_weight_block_size_is_an_error_naming_config(
    tmp_path: Path, qc: dict[str, Any]
) -> None:
    save(tmp_path, {"a.weight": f8(), "a.weight_scale_inv": f32(1, 1)}, qc)
    with pytest.raises(FormatError, match=r"config\.json: quantization_config\.weight_block_size"):
        flexq.compose(tmp_path, formats=["fp8"])


def test_unknown_compressed_tensors_strategy_is_an_error(tmp_path: Path) -> None:
    qc = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "token"}}},
    }
    save(tmp_path, {"a.weight": f8(), "a.weight_scale": f32(16, 1)}, qc)
    with pytest.raises(FormatError, match=r"config_groups\.g\.weights\.strategy 'token'"):
        flexq.compose(tmp_path, formats=["fp8"])


@pytest.mark.parametrize(
    ("field", "entries"),
    [
        ("ignored_layers", ["lm_head", "model.layers.0.mlp.gate"]),
        ("modules_to_not_convert", ["lm_head", "gate"]),
        ("ignore", ["re:.*lm_head", "re:.*mlp\\.gate$"]),
    ],
)
def test_ignored_modules_pass_through_and_their_scales_are_not_orphans(
    tmp_path: Path, field: str, entries: list[str]
) -> None:
    qc: dict[str, Any] = {"quant_method": "fp8", field: entries}
    tensors = {
        "lm_head.weight": bf16(4, 4),
        "model.layers.0.mlp.gate.weight": bf16(4, 16),
        # a leftover scale in an ignored module is not an FP8 component
        "model.layers.0.mlp.gate.weight_scale": f32(),
        # component matching: "gate" does not cover "gate_proj"
        "model.layers.0.mlp.gate_proj.weight": f8(),
        "model.layers.0.mlp.gate_proj.weight_scale": f32(),
    }
    save(tmp_path, tensors, qc)
    assert owners(tmp_path) == {
        "lm_head.weight": "passthrough",
        "model.layers.0.mlp.gate.weight": "passthrough",
        "model.layers.0.mlp.gate.weight_scale": "passthrough",
        "model.layers.0.mlp.gate_proj.weight": "fp8",
    }


def test_f8_weight_in_an_ignored_module_is_an_error(tmp_path: Path) -> None:
    save(
        tmp_path,
        {"lm_head.weight": f8(), "lm_head.weight_scale": f32()},
        {"quant_method": "fp8", "ignored_layers": ["lm_head"]},
    )
    with pytest.raises(
        FormatError, match=r"'lm_head\.weight' is F8_E4M3.*ignored_layers.*'lm_head'"
    ):
        flexq.compose(tmp_path, formats=["fp8"])


def test_input_and_kv_cache_scales_pass_through_untouched(tmp_path: Path) -> None:
    tensors = {
        "attn.q_proj.weight": f8(),
        "attn.q_proj.weight_scale": f32(),
        "attn.q_proj.input_scale": f32(value=0.25),
        "attn.k_scale": f32(value=3.0),
        "attn.v_scale": f32(value=5.0),
    }
    save(tmp_path, tensors, {"quant_method": "fp8", "activation_scheme": "static"})
    ct = flexq.compose(tmp_path, formats=["fp8"])
    assert {k: e.owner for k, e in ct.entries.items()} == {
        "attn.q_proj.weight": "fp8",
        "attn.q_proj.input_scale": "passthrough",
        "attn.k_scale": "passthrough",
        "attn.v_scale": "passthrough",
    }
    assert ct.load("attn.k_scale", "float32").tolist() == 3.0
    assert ct.load("attn.q_proj.input_scale", "float32").tolist() == 0.25


def test_fp8_weights_are_detected_from_tensors_without_config(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": f8(), "a.weight_scale": f32(value=2.0), "b.weight": bf16(2, 2)})
    assert not (tmp_path / "config.json").exists()
    ct = flexq.compose(tmp_path, formats=["fp8"])
    assert ct.entries["a.weight"].owner == "fp8"
    assert ct.entries["a.weight"].sources == ("a.weight", "a.weight_scale")
    assert ct.load("a.weight", "float32")[0, 1] == np.float32(2.0 * 2.0**-9)


def test_nvfp4_style_f8_scale_is_not_taken_for_a_weight(tmp_path: Path) -> None:
    # NVFP4 stores E4M3 *group scales* beside a packed U8 weight: not an fp8 weight.
    tensors = {
        "a.weight": RawTensor("U8", np.zeros((16, 4), np.uint8)),
        "a.weight_scale": RawTensor(F8, np.zeros((16, 1), np.uint8)),
        "a.weight_scale_2": f32(),
    }
    save(tmp_path, tensors)
    ckpt = flexq.Checkpoint(tmp_path)
    found = analyze(ckpt)
    assert found.tensors == {}
    assert found.recognized == frozenset()
    problems = flexq.compose(ckpt, formats=["fp8"], strict=False).problems
    assert problems == [
        "model.safetensors: tensor 'a.weight_scale' has element format F8_E4M3, which no "
        "format in ['fp8'] decodes"
    ]


def test_packed_mxfp4_scale_is_left_to_its_format(tmp_path: Path) -> None:
    tensors = {
        "a.weight_packed": RawTensor("U8", np.zeros((16, 4), np.uint8)),
        "a.weight_scale": RawTensor("U8", np.zeros((16, 1), np.uint8)),
    }
    save(tmp_path, tensors)
    assert analyze(flexq.Checkpoint(tmp_path)).recognized == frozenset()


def test_analysis_runs_once_per_checkpoint(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": f8(), "a.weight_scale": f32()})
    ckpt = flexq.Checkpoint(tmp_path)
    assert analyze(ckpt) is analyze(ckpt)
    assert analyze(flexq.Checkpoint(tmp_path)) is not analyze(ckpt)


def test_apply_rejects_sources_of_the_wrong_shape(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": f8(), "a.weight_scale_inv": f32(2, 1)}, None)
    ct = flexq.compose(tmp_path, formats=["fp8"])
    plan = ct.plan("a.weight", flexq.TargetSlice.whole((16, 8), "float32"))
    sources = ct.read_sources(plan)
    with pytest.raises(FormatError, match=r"'a\.weight_scale_inv' arrived with shape \(1, 1\)"):
        ct.decode(
            "a.weight",
            {**sources, "a.weight_scale_inv": np.ones((1, 1), np.float32)},
            plan,
            "float32",
        )
    with pytest.raises(FormatError, match=r"'a\.weight' arrived with shape \(8, 8\)"):
        ct.decode("a.weight", {**sources, "a.weight": sources["a.weight"][:8]}, plan, "float32")
    with pytest.raises(FormatError, match=r"needs \['a\.weight_scale_inv'\]"):
        ct.decode("a.weight", {"a.weight": sources["a.weight"]}, plan, "float32")


def test_logical_key_of_another_format_is_refused(tmp_path: Path) -> None:
    save(tmp_path, {"a.weight": f8(), "a.weight_scale": f32()})
    from flexq_fp8.plugin import plugin

    with pytest.raises(FormatError, match=r"'b\.weight' is not a tensor of format 'fp8'"):
        plugin.flexq_source_keys(flexq.Checkpoint(tmp_path), "b.weight")


def test_modelopt_fp8_checkpoint_is_claimed_per_tensor(tmp_path: Path) -> None:
    # ModelOpt FP8 export: 0-d F32 weight_scale and input_scale; the config names
    # quant_method "modelopt" (which nvfp4 claims too, for quant_algo NVFP4).
    qc = {"quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"]}
    tensors = {"m.weight": f8(), "m.weight_scale": f32(value=0.25), "m.input_scale": f32()}
    ct = flexq.compose(save(tmp_path, tensors, qc))
    assert ct.entries["m.weight"].owner == "fp8"
    assert ct.entries["m.input_scale"].is_passthrough
    codes = (np.arange(16 * 8) % 120).astype(np.uint8).reshape(16, 8)
    want = e4m3_values(codes) * np.float32(0.25)
    np.testing.assert_array_equal(ct.load("m.weight", "float32"), want)


def e4m3_values(codes: np.ndarray) -> np.ndarray:
    """E4M3FN codes below 0x78 as float32: (1 + m/8) * 2^(e-7), subnormals m * 2^-9."""
    e, m = (codes >> 3).astype(np.int64), (codes & 7).astype(np.float64)
    value = np.where(e == 0, m * 2.0**-9, (1 + m / 8) * np.exp2(e - 7.0))
    return value.astype(np.float32)


def test_compressed_tensors_mxfp8_is_claimed_and_decoded_per_32(
    tmp_path: Path, reference: Any, rng: np.random.Generator
) -> None:
    # llm-compressor's MXFP8A16 (compressed-tensors 0.19): format mxfp8-quantized,
    # F8_E4M3 weight [out, in], U8 E8M0 weight_scale [out, in/32]. It was refused as
    # a method no format claims (the regression of issue 25).
    qc = {
        "quant_method": "compressed-tensors",
        "format": "mxfp8-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "format": "mxfp8-quantized",
                "weights": {
                    "num_bits": 8,
                    "type": "float",
                    "strategy": "group",
                    "group_size": 32,
                    "symmetric": True,
                    "scale_dtype": "torch.uint8",
                },
            }
        },
        "ignore": ["lm_head"],
    }
    codes = rng.integers(0, 0x7F, size=(4, 96), dtype=np.uint8)
    scale = RawTensor("U8", rng.integers(110, 140, size=(4, 3), dtype=np.uint8))
    save(tmp_path, {"m.weight": RawTensor(F8, codes), "m.weight_scale": scale}, qc)
    ct = flexq.compose(tmp_path)
    assert ct.entries["m.weight"].owner == "fp8"
    got = ct.load("m.weight", "float32")
    want = reference(codes, scale, (1, 32))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_mxfp8_scale_grid_that_is_not_per_32_is_an_error(tmp_path: Path) -> None:
    qc = {
        "quant_method": "compressed-tensors",
        "format": "mxfp8-quantized",
        "config_groups": {
            "g": {
                "weights": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 32}
            }
        },
    }
    scale = RawTensor("U8", np.full((16, 2), 127, dtype=np.uint8))
    save(tmp_path, {"a.weight": f8(16, 128), "a.weight_scale": scale}, qc)
    with pytest.raises(FormatError, match=r"a\.weight_scale.*1x32.*format fp8"):
        flexq.compose(tmp_path, formats=["fp8"])


MODELOPT_PB_WO = {"quant_method": "modelopt", "quant_algo": "fp8_pb_wo", "ignore": ["lm_head"]}


def test_modelopt_fp8_pb_wo_infers_its_square_block_from_the_grids(
    tmp_path: Path, reference: Any, rng: np.random.Generator
) -> None:
    # NVIDIA ModelOpt FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG: F32 weight_scale [g0, 1, g1, 1]
    # (the blocked reshape's size-1 dims kept), 128x128 blocks padded at the edge,
    # the block size in neither config. 256x320 -> [2, 1, 3, 1], 320x256 -> [3, 1, 2, 1].
    tensors: dict[str, RawTensor] = {}
    codes: dict[str, np.ndarray] = {}
    for name, shape in {"up": (256, 320), "down": (320, 256)}.items():
        codes[name] = rng.integers(0, 0x7F, size=shape, dtype=np.uint8)
        grid = (-(-shape[0] // 128), -(-shape[1] // 128))
        scale = rng.uniform(2.0**-10, 2.0**-4, size=(grid[0], 1, grid[1], 1)).astype(np.float32)
        tensors[f"{name}.weight"] = RawTensor(F8, codes[name])
        tensors[f"{name}.weight_scale"] = RawTensor.of(scale)
    ct = flexq.compose(save(tmp_path, tensors, MODELOPT_PB_WO))
    for name in ("up", "down"):
        assert ct.entries[f"{name}.weight"].owner == "fp8"
        got = ct.load(f"{name}.weight", "float32")
        grid_scale = RawTensor.of(tensors[f"{name}.weight_scale"].data.reshape(-1))
        want = reference(codes[name], grid_scale, (128, 128))
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_modelopt_fp8_pb_wo_with_an_undecidable_block_size_is_refused(tmp_path: Path) -> None:
    # 64 rows in 2 blocks and 48 columns in 1: every square edge 48..63 fits, the
    # preset's 128 does not, and each decodes differently.
    scale = RawTensor.of(np.full((2, 1, 1, 1), 0.5, dtype=np.float32))
    save(tmp_path, {"a.weight": f8(64, 48), "a.weight_scale": scale}, MODELOPT_PB_WO)
    with pytest.raises(FormatError, match=r"a\.weight_scale.*fp8_pb_wo.*48\.\.63.*format fp8"):
        flexq.compose(tmp_path, formats=["fp8"])


def test_modelopt_fp8_pb_wo_grids_no_single_edge_fits_are_refused(tmp_path: Path) -> None:
    # 256 rows in 2 blocks needs an edge of 128..255; 256 rows in 4 blocks 64..85.
    tensors = {
        "a.weight": f8(256, 128),
        "a.weight_scale": RawTensor.of(np.full((2, 1, 1, 1), 0.5, dtype=np.float32)),
        "b.weight": f8(256, 128),
        "b.weight_scale": RawTensor.of(np.full((4, 1, 1, 1), 0.5, dtype=np.float32)),
    }
    save(tmp_path, tensors, MODELOPT_PB_WO)
    with pytest.raises(FormatError, match=r"b\.weight_scale.*fits no square block edge"):
        flexq.compose(tmp_path, formats=["fp8"])


def test_scale_with_more_dims_than_the_weight_that_is_not_blocked_is_an_error(
    tmp_path: Path,
) -> None:
    scale = RawTensor.of(np.full((2, 2, 1, 1), 0.5, dtype=np.float32))
    save(tmp_path, {"a.weight": f8(256, 256), "a.weight_scale": scale})
    with pytest.raises(FormatError, match=r"has more dims than the weight"):
        flexq.compose(tmp_path, formats=["fp8"])
