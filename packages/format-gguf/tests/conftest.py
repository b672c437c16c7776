"""Fixtures for the GGUF tests: random blocks of every type and tiny GGUF models written
with gguf-py's own writer (the producer's library; llama.cpp-built files are in interop)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from flexq_format_gguf.ggml import BY_NAME

#: Byte offsets of each block type's float16 scales (d, dmin), kept finite in random
#: blocks so that values are numbers (the decoders are checked on NaN/inf apart).
HALVES = {
    "Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "IQ4_NL": (0,), "IQ4_XS": (0,),
}  # fmt: skip
BLOCK_TYPES = tuple(HALVES)
FLOAT_TYPES = ("F32", "F16", "BF16")


def random_blocks(
    rng: np.random.Generator, type_name: str, lead: tuple[int, ...], n: int
) -> np.ndarray:
    """Random stored bytes ``[*lead, n / block * nbytes]`` of block type ``type_name``
    with finite scales around 2^-7 (float types: random values of that type's bytes)."""
    if type_name in FLOAT_TYPES:
        values = rng.standard_normal((*lead, n)).astype(np.float32)
        out = gguf.quants.quantize(values, gguf.GGMLQuantizationType[type_name])
        return np.asarray(out)
    t = BY_NAME[type_name]
    blocks = rng.integers(0, 256, (*lead, n // t.block, t.nbytes), dtype=np.uint8)
    for at in HALVES[type_name]:
        half = (rng.standard_normal(blocks.shape[:-1]) / 128).astype(np.float16)
        blocks[..., at : at + 2] = half[..., None].view(np.uint8)
    return blocks.reshape(*lead, -1)


def gguf_dequantize(raw: np.ndarray, type_name: str) -> np.ndarray:
    """gguf-py's own dequantization of stored bytes (the oracle)."""
    if type_name == "F32":
        return np.asarray(raw, np.float32)
    if type_name == "F16":
        return np.asarray(raw, np.float16).astype(np.float32)
    return np.asarray(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[type_name]))


Tensors = Mapping[str, tuple[np.ndarray, str]]


def write_gguf(
    path: Path, arch: str, config: Mapping[str, Any], tensors: Tensors, split: int = 0
) -> Path:
    """A GGUF file at ``path`` holding ``tensors`` (name -> (stored bytes or values, ggml
    type name)) with ``arch``'s metadata from ``config`` (HF keys); with ``split``, a
    split set of at most that many tensors per file (``path`` is then its stem)."""
    w = gguf.GGUFWriter(str(path), arch, split_max_tensors=split)
    w.add_block_count(config["num_hidden_layers"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_context_length(config.get("max_position_embeddings", 128))
    w.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-6))
    w.add_rope_freq_base(config.get("rope_theta", 10000.0))
    w.add_vocab_size(config["vocab_size"])
    if "head_dim" in config:
        w.add_key_length(config["head_dim"])
        w.add_value_length(config["head_dim"])
    if "num_experts" in config:
        w.add_expert_count(config["num_experts"])
        w.add_expert_used_count(config["num_experts_per_tok"])
        w.add_expert_feed_forward_length(config["moe_intermediate_size"])
    if "shared_expert_intermediate_size" in config:
        w.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])
    for name, (data, type_name) in tensors.items():
        qtype = gguf.GGMLQuantizationType[type_name]
        if type_name in ("F32", "F16"):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


TINY = {
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32,
}  # fmt: skip
#: The MoE architectures' expert sizes: 3 experts of 2 used, experts narrower than the
#: dense size (so a config taking one for the other shows), a shared expert for qwen2moe.
MOE_TINY: dict[str, dict[str, int]] = {
    "qwen2moe": {"num_experts": 3, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                 "shared_expert_intermediate_size": 512},
    "qwen3moe": {"num_experts": 3, "num_experts_per_tok": 2, "moe_intermediate_size": 256},
}  # fmt: skip


def tiny_model(
    rng: np.random.Generator, arch: str, weight_type: str, config: Mapping[str, Any] = TINY
) -> dict[str, tuple[np.ndarray, str]]:
    """The tensors of a one-layer model of ``arch``: linear weights in ``weight_type``,
    norms in F32, embeddings in F16 (as llama.cpp's presets mix them)."""
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    hd = config.get("head_dim", h // config["num_attention_heads"])
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd

    def norm(n: int) -> tuple[np.ndarray, str]:
        return (1 + rng.standard_normal(n) / 8).astype(np.float32), "F32"

    t = {
        "token_embd.weight": (random_blocks(rng, "F16", (v,), h), "F16"),
        "output_norm.weight": norm(h),
        "output.weight": (random_blocks(rng, "Q8_0", (v,), h), "Q8_0"),
        "blk.0.attn_norm.weight": norm(h),
        "blk.0.ffn_norm.weight": norm(h),
    }
    for part, (rows, cols) in {
        "attn_q": (q, h), "attn_k": (kv, h), "attn_v": (kv, h), "attn_output": (h, q),
        "ffn_gate": (f, h), "ffn_up": (f, h), "ffn_down": (h, f),
    }.items():  # fmt: skip
        t[f"blk.0.{part}.weight"] = (random_blocks(rng, weight_type, (rows,), cols), weight_type)
    if arch in MOE_TINY:
        moe = MOE_TINY[arch]
        e, i = moe["num_experts"], moe["moe_intermediate_size"]
        for part in ("ffn_gate", "ffn_up", "ffn_down"):
            del t[f"blk.0.{part}.weight"]
        t["blk.0.ffn_gate_inp.weight"] = norm(e * h)[0].reshape(e, h), "F32"
        for part, (rows, cols) in {"ffn_gate_exps": (i, h), "ffn_up_exps": (i, h),
                                   "ffn_down_exps": (h, i)}.items():  # fmt: skip
            t[f"blk.0.{part}.weight"] = (
                random_blocks(rng, weight_type, (e, rows), cols),
                weight_type,
            )
        if "shared_expert_intermediate_size" in moe:
            s = moe["shared_expert_intermediate_size"]
            t["blk.0.ffn_gate_inp_shexp.weight"] = norm(h)
            for part, (rows, cols) in {"ffn_gate_shexp": (s, h), "ffn_up_shexp": (s, h),
                                       "ffn_down_shexp": (h, s)}.items():  # fmt: skip
                t[f"blk.0.{part}.weight"] = (
                    random_blocks(rng, weight_type, (rows,), cols),
                    weight_type,
                )
    if arch in ("qwen2", "qwen2moe"):
        for part, n in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
            t[f"blk.0.{part}.bias"] = norm(n)
    if arch in ("qwen3", "qwen3moe"):
        t["blk.0.attn_q_norm.weight"] = norm(hd)
        t["blk.0.attn_k_norm.weight"] = norm(hd)
    return t


Build = Callable[..., Path]


@pytest.fixture
def build(tmp_path: Path) -> Build:
    """``build(arch, weight_type, name="model.gguf", seed=0, split=0)`` -> a tiny GGUF model."""

    def make(
        arch: str, weight_type: str, name: str = "model.gguf", seed: int = 0, split: int = 0
    ) -> Path:
        rng = np.random.default_rng(seed)
        config = {**TINY, **MOE_TINY.get(arch, {})}
        if arch in ("qwen3", "qwen3moe"):
            config["head_dim"] = 64
        tensors = tiny_model(rng, arch, weight_type, config)
        return write_gguf(tmp_path / name, arch, config, tensors, split)

    return make


def reverse_permute(w: np.ndarray, n_head: int, n_kv: int | None = None) -> np.ndarray:
    """transformers' ``TensorProcessor`` reverse of llama.cpp's Q/K permutation
    (modeling_gguf_pytorch_utils.py ``_reverse_permute_weights``), the oracle."""
    if n_kv is not None and n_head != n_kv:
        n_head = n_kv
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def reference_state_dict(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a GGUF file as gguf-py reads and dequantizes it, by GGUF name,
    llama's Q/K rows put back as transformers does."""
    reader = gguf.GGUFReader(path)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    heads = int(reader.fields[f"{arch}.attention.head_count"].parts[-1][0])
    kv = int(reader.fields[f"{arch}.attention.head_count_kv"].parts[-1][0])
    out = {}
    for t in reader.tensors:
        w = gguf_dequantize(np.asarray(t.data), t.tensor_type.name)
        w = w.reshape(tuple(reversed([int(d) for d in t.shape])))
        if arch == "llama" and ".attn_q." in t.name:
            w = reverse_permute(w, heads, heads)
        if arch == "llama" and ".attn_k." in t.name:
            w = reverse_permute(w, heads, kv)
        out[t.name] = w
    return out


@pytest.fixture(scope="session")
def reference() -> Callable[[Path], dict[str, np.ndarray]]:
    """:func:`reference_state_dict` (tests take helpers as fixtures: mypy cannot import a
    conftest under a directory whose name has a hyphen)."""
    return reference_state_dict


Converted = tuple[Path, dict[str, Any]]


@pytest.fixture
def convert(tmp_path: Path) -> Callable[[Path], Converted]:
    """``convert(path)`` -> the plain checkpoint ``flexq convert --dtype float32`` writes of
    the GGUF model at ``path`` (the command exits 0) and the config.json it writes there."""

    def run(path: Path) -> Converted:
        from flexq.cli.main import main

        out = tmp_path / "out"
        assert main(["convert", str(path), str(out), "--dtype", "float32"]) == 0
        return out, json.loads((out / "config.json").read_text())

    return run


@pytest.fixture(scope="session")
def dequantize_ref() -> Callable[[np.ndarray, str], np.ndarray]:
    """:func:`gguf_dequantize`, the oracle."""
    return gguf_dequantize


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str, Tensors], Path]:
    """``write(file_name, arch, tensors)`` -> a GGUF file with TINY's metadata."""
    return lambda name, arch, tensors: write_gguf(tmp_path / name, arch, TINY, tensors)


@pytest.fixture(scope="session")
def boxed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """One GGUF file with a [6, 512] tensor of every type and gguf-py's dequantized values."""
    rng = np.random.default_rng(7)
    tensors = {
        f"t.{name}": (random_blocks(rng, name, (6,), 512), name)
        for name in (*BLOCK_TYPES, *FLOAT_TYPES)
    }
    path = write_gguf(tmp_path_factory.mktemp("boxes") / "boxes.gguf", "llama", TINY, tensors)
    reader = gguf.GGUFReader(path)
    ref = {t.name: gguf_dequantize(np.asarray(t.data), t.tensor_type.name) for t in reader.tensors}
    return path, ref
