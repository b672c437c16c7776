"""GGUF files into PaddleFormers: ``flexq.paddleformers.from_pretrained(cls, "model.gguf")``
builds the model from the config flexq-format-gguf derives from the metadata, and its
logits equal those of PaddleFormers' own ``from_pretrained`` of ``flexq convert``'s output.

The GGUF files are written with gguf-py's writer (Q8_0 linears, F32 norms, F16
embeddings; llama's Q/K rows permuted as llama.cpp's convert_hf_to_gguf.py does), or as
F32 and quantized by llama.cpp itself; the logits of both stay within their quantization's
error of PaddleFormers' own load of the float weights they were made from. Bit-exactness
of llama.cpp-built files against transformers is checked in ``nox -s interop``.
Run by ``nox -s paddleformers``; skipped where paddleformers is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddleformers")
pytest.importorskip("gguf")

import gguf
import paddle

import flexq.paddleformers
from flexq.cli.main import main

H, F, HEADS, KV, VOCAB = 64, 128, 4, 2, 96


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute`` (convert_hf_to_gguf.py)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


#: llama.cpp's tensor names -> Hugging Face's (llama), ``{i}`` the layer.
HF_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}


def hf_name(gguf_name: str) -> str:
    """The Hugging Face name of a llama tensor of :func:`write_model`."""
    layer = gguf_name.split(".")[1] if gguf_name.startswith("blk.") else ""
    pattern = gguf_name.replace(f"blk.{layer}.", "blk.{i}.") if layer else gguf_name
    return HF_NAMES[pattern].format(i=layer)


def write_model(
    path: Path,
    arch: str,
    originals: dict[str, np.ndarray] | None = None,
    *,
    dims: tuple[int, int] = (H, F),
    linears: str = "Q8_0",
) -> Path:
    """A two-layer ``arch`` model as a GGUF file (random weights), hidden and feed-forward
    sizes ``dims``, linears in ``linears`` (``Q8_0``, or ``F32`` for llama.cpp's quantizer to
    quantize); ``originals``, if given, receives each tensor's float32 values before
    quantization and llama's Q/K permutation, by GGUF name (the checkpoint the file was
    made from)."""
    H, F = dims  # the module's names, at this file's sizes
    rng = np.random.default_rng(3)
    hd = H // HEADS
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(2)
    w.add_embedding_length(H)
    w.add_feed_forward_length(F)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_context_length(64)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(VOCAB)
    w.add_key_length(hd)
    w.add_value_length(hd)

    def add(name: str, shape: tuple[int, ...], q8: bool = True, heads: int = 0) -> None:
        x = (rng.standard_normal(shape) / 8).astype(np.float32)
        if not q8:
            x = 1 + x
        if originals is not None:
            originals[name] = x
        if heads and arch == "llama":
            x = permute(x, heads)
        if q8 and linears == "Q8_0":
            w.add_tensor(
                name,
                gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0),
                raw_dtype=gguf.GGMLQuantizationType.Q8_0,
            )
        else:
            w.add_tensor(name, x)

    add("token_embd.weight", (VOCAB, H), q8=False)
    add("output_norm.weight", (H,), q8=False)
    add("output.weight", (VOCAB, H))
    for i in range(2):
        b = f"blk.{i}"
        add(f"{b}.attn_norm.weight", (H,), q8=False)
        add(f"{b}.ffn_norm.weight", (H,), q8=False)
        add(f"{b}.attn_q.weight", (HEADS * hd, H), heads=HEADS)
        add(f"{b}.attn_k.weight", (KV * hd, H), heads=KV)
        add(f"{b}.attn_v.weight", (KV * hd, H))
        add(f"{b}.attn_output.weight", (H, HEADS * hd))
        add(f"{b}.ffn_gate.weight", (F, H))
        add(f"{b}.ffn_up.weight", (F, H))
        add(f"{b}.ffn_down.weight", (H, F))
        if arch == "qwen2":
            for part, n in (("attn_q", HEADS * hd), ("attn_k", KV * hd), ("attn_v", KV * hd)):
                add(f"{b}.{part}.bias", (n,), q8=False)
        if arch == "qwen3":
            add(f"{b}.attn_q_norm.weight", (hd,), q8=False)
            add(f"{b}.attn_k_norm.weight", (hd,), q8=False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def logits(model: Any) -> np.ndarray:
    """``model``'s float32 logits for one fixed sequence of 12 token ids (CPU kernels)."""
    model.config.fuse_rms_norm = False  # the fused kernel is GPU-only
    model.eval()
    ids = paddle.to_tensor(np.arange(12).reshape(1, 12) % VOCAB)
    with paddle.no_grad():
        out: np.ndarray = model(input_ids=ids)[0].numpy()
    return out


#: Llama only: PaddleFormers 1.2.0's Qwen2/Qwen3 classes (the *Deprecated ones too)
#: import paddlefleet here, which this session does not install.
CLASS = {"llama": "LlamaForCausalLM"}


@pytest.mark.parametrize("arch", list(CLASS))
def test_from_pretrained_of_a_gguf_file_gives_the_logits_of_its_converted_checkpoint(
    tmp_path: Path, arch: str
) -> None:
    import paddleformers.transformers as pft

    cls = getattr(pft, CLASS[arch])
    path = write_model(tmp_path / f"{arch}.gguf", arch)
    out = tmp_path / "converted"
    assert main(["convert", str(path), str(out), "--dtype", "float32"]) == 0
    ours = flexq.paddleformers.from_pretrained(cls, path, dtype="float32")
    ref = cls.from_pretrained(str(out), dtype="float32")
    got, want = logits(ours), logits(ref)
    assert np.isfinite(want).all()
    np.testing.assert_array_equal(got, want)


def test_an_auto_class_picks_the_gguf_models_class_from_its_built_config(tmp_path: Path) -> None:
    from paddleformers.transformers import AutoModelForCausalLM, LlamaForCausalLM

    path = write_model(tmp_path / "llama.gguf", "llama")
    model = flexq.paddleformers.from_pretrained(AutoModelForCausalLM, path, dtype="float32")
    assert type(model) is LlamaForCausalLM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama.gguf"]  # nothing written beside it


def llama_cpp_quantized(src: Path, out: Path, ftype: str) -> Path:
    """``src`` (an F32 GGUF file) quantized by llama.cpp itself (llama-cpp-python's
    ``llama_model_quantize``, installed by ``nox -s paddleformers``) to ``ftype``."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), params) == 0
    return out


#: how the file is made -> (hidden, feed-forward), the logits' least cosine to the float
#: model's and largest difference as a share of the largest logit. Measured here (fixed
#: seed): Q8_0 cosine 0.99997, 0.83%; Q4_K_M cosine 0.966, 24%: on random Gaussian weights
#: (4 bits' worst case) llama.cpp's Q4_K tensors keep 7% relative error, its Q6_K 1.8%.
CHAINS = {
    "Q8_0 (gguf-py)": ((H, F), 0.9999, 0.02),
    "Q4_K_M (llama.cpp)": ((256, 512), 0.95, 0.35),
}


@pytest.mark.parametrize("chain", list(CHAINS))
def test_gguf_logits_stay_within_the_quantization_error_of_the_checkpoint_it_came_from(
    tmp_path: Path, chain: str
) -> None:
    """The whole chain: float weights -> a GGUF file -> ``flexq.paddleformers.from_pretrained``,
    against PaddleFormers' own load of the float weights. Q8_0 is written by gguf-py (llama.cpp's
    own python package); Q4_K_M by llama.cpp's quantizer from an F32 file of the same weights
    (its K-quants need rows of 256, hence the wider model). The bounds are CHAINS'."""
    import safetensors.numpy
    from paddleformers.transformers import LlamaForCausalLM

    dims, least_cosine, largest_difference = CHAINS[chain]
    originals: dict[str, np.ndarray] = {}
    if chain.startswith("Q8_0"):
        path = write_model(tmp_path / "llama.gguf", "llama", originals, dims=dims)
    else:
        f32 = write_model(tmp_path / "f32.gguf", "llama", originals, dims=dims, linears="F32")
        path = llama_cpp_quantized(f32, tmp_path / "llama.gguf", "Q4_K_M")
    converted = tmp_path / "converted"
    assert main(["convert", str(path), str(converted), "--dtype", "float32"]) == 0
    source = tmp_path / "source"
    source.mkdir()
    (source / "config.json").write_bytes((converted / "config.json").read_bytes())
    safetensors.numpy.save_file(
        {hf_name(k): np.ascontiguousarray(v) for k, v in originals.items()},
        str(source / "model.safetensors"),
    )
    ours = flexq.paddleformers.from_pretrained(LlamaForCausalLM, path, dtype="float32")
    ref = LlamaForCausalLM.from_pretrained(str(source), dtype="float32")
    got, want = logits(ours), logits(ref)
    assert np.isfinite(want).all()
    assert not np.array_equal(got, want)  # the GGUF file is quantized, not a float copy
    cosine = float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want))
    assert cosine > least_cosine, cosine
    assert np.abs(got - want).max() < largest_difference * np.abs(want).max()
