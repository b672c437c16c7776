"""GGUF MoE models (qwen2moe, qwen3moe) and the tensors transformers derives (rope_freqs):
names, stacking and config as transformers' GGUF loader gives them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq.cli.main import main
from flexq.errors import FormatError
from flexq.plan import TargetSlice

Build = Callable[..., Path]
Reference = Callable[[Path], dict[str, np.ndarray]]
Convert = Callable[[Path], tuple[Path, dict[str, Any]]]
Write = Callable[[str, str, dict[str, tuple[np.ndarray, str]]], Path]

#: The HF names transformers gives the tensors of block 0 of a qwen2moe / qwen3moe model
#: (Qwen2MoeTensorProcessor and gguf-py's name map); the experts have no ``.weight``.
MOE_NAMES = {
    "blk.0.ffn_gate_inp.weight": "model.layers.0.mlp.gate.weight",
    "blk.0.ffn_down_exps.weight": "model.layers.0.mlp.experts.down_proj",
    "blk.0.ffn_gate_inp_shexp.weight": "model.layers.0.mlp.shared_expert_gate.weight",
    "blk.0.ffn_gate_shexp.weight": "model.layers.0.mlp.shared_expert.gate_proj.weight",
    "blk.0.ffn_up_shexp.weight": "model.layers.0.mlp.shared_expert.up_proj.weight",
    "blk.0.ffn_down_shexp.weight": "model.layers.0.mlp.shared_expert.down_proj.weight",
    "blk.0.attn_norm.weight": "model.layers.0.input_layernorm.weight",
    "blk.0.ffn_norm.weight": "model.layers.0.post_attention_layernorm.weight",
    "blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight",
    "blk.0.attn_k.weight": "model.layers.0.self_attn.k_proj.weight",
    "blk.0.attn_v.weight": "model.layers.0.self_attn.v_proj.weight",
    "blk.0.attn_output.weight": "model.layers.0.self_attn.o_proj.weight",
    "blk.0.attn_q.bias": "model.layers.0.self_attn.q_proj.bias",
    "blk.0.attn_k.bias": "model.layers.0.self_attn.k_proj.bias",
    "blk.0.attn_v.bias": "model.layers.0.self_attn.v_proj.bias",
    "blk.0.attn_q_norm.weight": "model.layers.0.self_attn.q_norm.weight",
    "blk.0.attn_k_norm.weight": "model.layers.0.self_attn.k_norm.weight",
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
GATE_UP = "model.layers.0.mlp.experts.gate_up_proj"


def transformers_moe(ref: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """gguf-py's tensors as transformers' Qwen2MoeTensorProcessor turns them into HF ones:
    gate and up experts into one zeroed [E, 2I, H] tensor (gate's rows first, up's
    after), the shared expert's gate vector expanded to [1, H]."""
    out = {MOE_NAMES[k]: v for k, v in ref.items() if k in MOE_NAMES}
    gate, up = ref["blk.0.ffn_gate_exps.weight"], ref["blk.0.ffn_up_exps.weight"]
    stacked = np.zeros((gate.shape[0], 2 * gate.shape[1], gate.shape[2]), np.float32)
    stacked[:, : gate.shape[1]] = gate
    stacked[:, gate.shape[1] :] = up
    out[GATE_UP] = stacked
    shexp = "model.layers.0.mlp.shared_expert_gate.weight"
    if shexp in out:
        out[shexp] = np.expand_dims(out[shexp], axis=0)
    return out


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype == np.float32
    assert a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("weight_type", ["Q4_K", "Q8_0", "Q5_1", "F16"])
@pytest.mark.parametrize("arch", ["qwen2moe", "qwen3moe"])
def test_moe_tensors_load_by_the_names_and_layouts_transformers_gives_them(
    reference: Reference, build: Build, arch: str, weight_type: str
) -> None:
    path = build(arch, weight_type)
    want = transformers_moe(reference(path))
    ct = flexq.compose(path)
    assert set(ct.logical_metadata()) == set(want)
    for key, value in want.items():
        same_bits(ct.load(key, "float32"), value)
    assert ct.entries[GATE_UP].shape == (3, 512, 256)
    assert ct.entries["model.layers.0.mlp.experts.down_proj"].shape == (3, 256, 256)


@pytest.mark.parametrize(
    ("offset", "shape", "parts"),
    [
        ((1, 200, 0), (2, 100, 256), ("gate", "up")),  # across the halves
        ((0, 300, 16), (3, 50, 100), ("up",)),  # in up's half only
        ((2, 0, 0), (1, 10, 256), ("gate",)),  # in gate's half only
    ],
)
def test_a_box_of_the_stacked_experts_reads_only_the_halves_it_meets(
    reference: Reference,
    build: Build,
    offset: tuple[int, int, int],
    shape: tuple[int, int, int],
    parts: tuple[str, ...],
) -> None:
    path = build("qwen3moe", "Q4_K")
    want = transformers_moe(reference(path))[GATE_UP]
    ct = flexq.compose(path)
    plan = ct.plan(GATE_UP, TargetSlice((3, 512, 256), shape, offset, "float32"))
    read = {
        half: int(np.prod(plan.source_slices[f"blk.0.ffn_{half}_exps.weight"][1]))
        for half in ("gate", "up")
    }
    assert {h for h, n in read.items() if n} == set(parts)
    box = np.asarray(ct.decode(GATE_UP, ct.read_sources(plan), plan, "float32"))
    cut = tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))
    same_bits(box, want[cut])


@pytest.mark.parametrize("arch", ["qwen2moe", "qwen3moe"])
def test_moe_config_json_has_the_experts_and_transformers_model_type(
    build: Build, arch: str
) -> None:
    with flexq.compose(build(arch, "Q8_0")).checkpoint as ckpt:
        config = ckpt.config
    cls = {"qwen2moe": "Qwen2MoeForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM"}[arch]
    assert config["architectures"] == [cls]
    assert config["model_type"] == {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe"}[arch]
    assert (config["num_experts"], config["num_experts_per_tok"]) == (3, 2)
    assert config["moe_intermediate_size"] == 256
    assert config["intermediate_size"] == 512
    if arch == "qwen2moe":
        assert config["shared_expert_intermediate_size"] == 512
        assert "norm_topk_prob" not in config  # Qwen2MoeConfig's own default
    else:
        assert config["norm_topk_prob"] is True  # transformers' GGUF default for qwen3moe
        assert config["head_dim"] == 64


def test_convert_of_a_moe_gguf_writes_transformers_names_and_its_config(
    reference: Reference, build: Build, convert: Convert
) -> None:
    path = build("qwen2moe", "Q6_K")
    out, config = convert(path)
    assert config["model_type"] == "qwen2_moe"
    want = transformers_moe(reference(path))
    ct = flexq.compose(out)
    assert set(ct.logical_metadata()) == set(want)
    same_bits(ct.load(GATE_UP, "float32"), want[GATE_UP])


def test_verify_deep_decodes_every_moe_tensor(build: Build) -> None:
    report = flexq.verify(build("qwen3moe", "Q5_K"), deep=True)
    assert report.problems == []
    assert [(s.format, s.tensors) for s in report.summary] == [("gguf", 14)]
    assert all(row.nonfinite == 0 for row in report.deep)


def test_stacked_experts_with_a_half_missing_are_an_error_naming_it(write: Write) -> None:
    gate = np.ones((2, 32, 32), np.float32)
    path = write("m.gguf", "qwen3moe", {"blk.0.ffn_gate_exps.weight": (gate, "F32")})
    with pytest.raises(FormatError) as err:
        flexq.compose(path)
    assert "m.gguf" in str(err.value)
    assert GATE_UP in str(err.value)
    assert "'blk.0.ffn_gate_exps.weight'" in str(err.value)


def test_experts_are_no_tensor_of_a_dense_architecture(write: Write) -> None:
    gate = np.ones((2, 32, 32), np.float32)
    path = write("m.gguf", "llama", {"blk.0.ffn_gate_exps.weight": (gate, "F32")})
    with pytest.raises(FormatError, match="'blk.0.ffn_gate_exps.weight' has no Hugging Face"):
        flexq.compose(path)


def test_llama3_rope_freqs_is_derived_and_skipped_as_transformers_does(
    write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    """transformers maps no HF tensor to ``rope_freqs.weight`` (its rope code recomputes the
    factors from the config), so its GGUF loader skips it: flexq neither loads it nor
    refuses the file, and inspect says it was left out."""
    norm = np.linspace(0.5, 1.5, 256, dtype=np.float32)
    path = write(
        "llama3.gguf",
        "llama",
        {
            "rope_freqs.weight": (np.ones(32, np.float32), "F32"),
            "output_norm.weight": (norm, "F32"),
        },
    )
    ct = flexq.compose(path)
    assert set(ct.logical_metadata()) == {"model.norm.weight"}
    np.testing.assert_array_equal(ct.load("model.norm.weight", "float32"), norm)
    report = flexq.verify(path)
    assert report.problems == []
    assert main(["inspect", str(path)]) == 0
    assert "not loaded (as transformers): rope_freqs.weight" in capsys.readouterr().out
