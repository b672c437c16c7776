"""GGUF files built by llama.cpp itself against transformers' own GGUF loading.

For llama, qwen2 and qwen3 tiny models in every type llama.cpp quantizes to that
flexq-format-gguf decodes (interop/producers/llamacpp.py): flexq's logical tensors
are transformers' names and shapes, bit-identical in float32; and the logits of the
HF model with flexq's weights stay within each type's quantization error of the
original model's (cosine, stated per type below). The MoE qwen2moe / qwen3moe models
(merged experts, router, shared expert) in a few types: the same checks, and
flexq's config.json agrees with transformers' GGUF config on every key it maps.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
if "FLEXQ_LLAMA_CPP_SDIST" not in os.environ:
    pytest.skip("FLEXQ_LLAMA_CPP_SDIST (set by nox -s interop) is not set", allow_module_level=True)

import torch

import flexq

from .producers import llamacpp

#: The smallest logits cosine (flexq's weights vs the float32 original) each type keeps
#: on these random tiny models (measured: Q4_0 gives 0.968 on llama, 0.968 on qwen3;
#: 2-bit weights lose the most).
COSINE = {
    "Q8_0": 0.999, "Q6_K": 0.998, "Q5_0": 0.99, "Q5_1": 0.99, "Q5_K_M": 0.99,
    "Q4_0": 0.95, "Q4_1": 0.95, "Q4_K_M": 0.95, "IQ4_NL": 0.95, "IQ4_XS": 0.95,
    "Q3_K_M": 0.9, "Q2_K": 0.7, "F16": 0.9999, "BF16": 0.999,
}  # fmt: skip


@pytest.fixture(scope="module")
def llama_cpp_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return llamacpp.vendored_llama_cpp(tmp_path_factory.mktemp("llama.cpp"))


def f32_of(
    arch: str, llama_cpp_tree: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, Path]:
    """(arch, the HF model dir, its F32 GGUF by llama.cpp's converter)."""
    root = tmp_path_factory.mktemp(arch)
    hf = llamacpp.build_hf(root / "hf", arch)
    return arch, hf, llamacpp.convert(llama_cpp_tree, hf, root / "f32.gguf")


@pytest.fixture(scope="module", params=list(llamacpp.ARCHS))
def f32_gguf(
    request: pytest.FixtureRequest, llama_cpp_tree: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, Path]:
    return f32_of(request.param, llama_cpp_tree, tmp_path_factory)


def logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.arange(16).reshape(1, 16) % llamacpp.VOCAB
    with torch.no_grad():
        return model(ids).logits.reshape(-1).float()


@pytest.mark.parametrize("kind", list(llamacpp.FTYPES))
def test_llama_cpp_files_load_bit_exact_with_transformers_and_keep_the_logits(
    f32_gguf: tuple[str, Path, Path], kind: str
) -> None:
    from transformers import AutoModelForCausalLM

    arch, hf, f32 = f32_gguf
    out = llamacpp.quantize(f32, f32.with_name(f"{kind}.gguf"), kind)
    before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in out.parent.iterdir())
    ref = llamacpp.transformers_state_dict(out)
    ct = flexq.compose(out)
    types = {ct.checkpoint.stored_dtype(k) for k in ct.checkpoint.tensors}
    ours = {k: ct.load(k, "float32") for k in ct.logical_metadata()}
    # transformers ties nothing here (untied lm_head); its state dict is the model's.
    assert set(ours) == set(ref)
    for key, want in ref.items():
        got = ours[key]
        assert got.shape == tuple(want.shape), key
        np.testing.assert_array_equal(
            got.view(np.uint32), want.numpy().view(np.uint32), err_msg=f"{kind} {key}"
        )
    original = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    quantized = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    quantized.load_state_dict({k: torch.from_numpy(v) for k, v in ours.items()})
    a, b = logits(original), logits(quantized)
    cosine = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
    assert cosine >= COSINE[kind], (kind, arch, sorted(types), cosine)
    after = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in out.parent.iterdir())
    assert before == after  # nothing written beside the file


#: The MoE files' types and their smallest logits cosine (measured on these models,
#: qwen2moe / qwen3moe: Q8_0 0.99997 / 0.99991, Q4_K_M 0.998 / 0.986, Q6_K 0.9997 / 0.9987;
#: a flipped top-2 routing costs the most).
MOE_COSINE = {"Q8_0": 0.999, "Q4_K_M": 0.95, "Q6_K": 0.995}


@pytest.fixture(scope="module", params=list(llamacpp.MOE_ARCHS))
def moe_f32_gguf(
    request: pytest.FixtureRequest, llama_cpp_tree: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, Path]:
    return f32_of(request.param, llama_cpp_tree, tmp_path_factory)


@pytest.mark.parametrize("kind", list(MOE_COSINE))
def test_llama_cpp_moe_files_load_bit_exact_with_transformers_and_keep_the_logits(
    moe_f32_gguf: tuple[str, Path, Path], kind: str
) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    arch, hf, f32 = moe_f32_gguf
    out = llamacpp.quantize(f32, f32.with_name(f"{kind}.gguf"), kind)
    ref = llamacpp.transformers_state_dict(out, config=hf)
    ct = flexq.compose(out)
    ours = {k: ct.load(k, "float32") for k in ct.logical_metadata()}
    assert set(ours) == set(ref)
    assert "model.layers.0.mlp.experts.gate_up_proj" in ours
    for key, want in ref.items():
        got = ours[key]
        assert got.shape == tuple(want.shape), key
        np.testing.assert_array_equal(
            got.view(np.uint32), want.numpy().view(np.uint32), err_msg=f"{kind} {key}"
        )
    theirs = load_gguf_checkpoint(str(out))["config"]
    config = ct.checkpoint.config
    for key in ("model_type", "num_experts", "num_experts_per_tok", "hidden_size",
                "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "rms_norm_eps", "rope_theta", "vocab_size", "norm_topk_prob"):  # fmt: skip
        assert config.get(key) == theirs.get(key), key
    original = AutoConfig.from_pretrained(hf)
    assert config["moe_intermediate_size"] == original.moe_intermediate_size
    original_model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    quantized = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    quantized.load_state_dict({k: torch.from_numpy(v) for k, v in ours.items()})
    a, b = logits(original_model), logits(quantized)
    cosine = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
    assert cosine >= MOE_COSINE[kind], (kind, arch, cosine)


def test_llama3_rope_freqs_is_skipped_as_transformers_skips_it(
    llama_cpp_tree: Path, tmp_path: Path
) -> None:
    """llama.cpp writes llama3-style rope scaling as a ``rope_freqs.weight`` tensor;
    transformers has no parameter for it (it derives the factors from the config) and
    skips it: flexq's tensors are exactly transformers' all the same."""
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 32}  # fmt: skip
    hf = llamacpp.build_hf(tmp_path / "hf", "llama", rope_scaling=rope)
    f32 = llamacpp.convert(llama_cpp_tree, hf, tmp_path / "f32.gguf")
    out = llamacpp.quantize(f32, tmp_path / "Q8_0.gguf", "Q8_0")
    from flexq_format_gguf.checkpoint import GGUFCheckpoint

    ct = flexq.compose(out)
    assert isinstance(ct.checkpoint, GGUFCheckpoint)
    assert ct.checkpoint.derived == ("rope_freqs.weight",)
    ref = llamacpp.transformers_state_dict(out)
    ours = {k: ct.load(k, "float32") for k in ct.logical_metadata()}
    assert set(ours) == set(ref)
    for key, want in ref.items():
        np.testing.assert_array_equal(ours[key].view(np.uint32), want.numpy().view(np.uint32))
