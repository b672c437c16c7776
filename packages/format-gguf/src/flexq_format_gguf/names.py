"""llama.cpp's tensor names, layouts and metadata -> Hugging Face names and config.json.

For the analysis (which logical tensor each GGUF tensor is) and the checkpoint's
``config``. It follows transformers' GGUF loader (``integrations/ggml.py``,
``modeling_gguf_pytorch_utils.py``): the same name map, the same config keys, and
the Q/K row permutation llama.cpp's ``convert_hf_to_gguf.py`` applies to
llama-family attention (``LlamaModel.permute``) undone for ``llama`` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flexq.errors import FormatError

if TYPE_CHECKING:
    from flexq_format_gguf.container import GGUFTensor

#: GGUF architecture -> the HF class transformers builds for it.
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
#: ``<arch>.<key>`` metadata -> config.json key (transformers' GGUF_CONFIG_MAPPING).
CONFIG_KEYS = {
    "context_length": "max_position_embeddings",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "embedding_length": "hidden_size",
    "rope.freq_base": "rope_theta",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.key_length": "head_dim",
    "vocab_size": "vocab_size",
}
#: Whole-model tensors.
GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
#: ``blk.N.<part>`` -> ``model.layers.N.<part>``.
BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK_NAME = re.compile(r"blk\.(?P<n>\d+)\.(?P<part>\w+)\.(?P<kind>weight|bias)")
#: The architectures whose Q/K rows llama.cpp permutes (transformers' LlamaConverter).
PERMUTED = frozenset({"llama"})


@dataclass(frozen=True)
class HFName:
    """The HF tensor a GGUF tensor is.

    :ivar heads: the heads llama.cpp permuted the rows in (None: not permuted).
    """

    name: str
    heads: int | None = None


def architecture(metadata: dict[str, Any], where: object) -> str:
    """The model's ``general.architecture``, refused when flexq does not map it."""
    arch = metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise FormatError(
            f"{where}: GGUF architecture {arch!r} is not mapped to Hugging Face names by "
            f"flexq-format-gguf (it maps {', '.join(sorted(ARCHITECTURES))})"
        )
    return str(arch)


def hf_name(name: str, arch: str, metadata: dict[str, Any], where: object) -> HFName:
    """The HF name (and permutation) of GGUF tensor ``name`` of architecture ``arch``.

    :raises FormatError: for a tensor name the map does not know.
    """
    if name in GLOBAL:
        return HFName(GLOBAL[name])
    m = _BLOCK_NAME.fullmatch(name)
    if m is None or m["part"] not in BLOCK:
        raise FormatError(
            f"{where}: GGUF tensor {name!r} has no Hugging Face name for architecture "
            f"{arch!r} (flexq-format-gguf maps {', '.join(GLOBAL)} "
            f"and blk.N.{{{', '.join(BLOCK)}}})"
        )
    hf = f"model.layers.{m['n']}.{BLOCK[m['part']]}.{m['kind']}"
    heads = None
    if arch in PERMUTED and m["part"] in ("attn_q", "attn_k"):
        key = "head_count" if m["part"] == "attn_q" else "head_count_kv"
        heads = int(
            metadata.get(f"{arch}.attention.{key}") or metadata[f"{arch}.attention.head_count"]
        )
    return HFName(hf, heads)


def hf_config(metadata: dict[str, Any], tensors: dict[str, GGUFTensor]) -> dict[str, Any]:
    """config.json as transformers builds it from the GGUF ``metadata``; {} for an
    architecture flexq does not map (the analysis reports it)."""
    arch = metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        return {}
    config: dict[str, Any] = {"architectures": [ARCHITECTURES[arch]], "model_type": arch}
    for key, hf in CONFIG_KEYS.items():
        if f"{arch}.{key}" in metadata:
            config[hf] = metadata[f"{arch}.{key}"]
    if "vocab_size" not in config:
        tokens = metadata.get("tokenizer.ggml.tokens")
        embed = tensors.get("token_embd.weight")
        config["vocab_size"] = (
            len(tokens) if tokens is not None else embed.shape[0] if embed else None
        )
    config.setdefault("num_key_value_heads", config.get("num_attention_heads"))
    config["tie_word_embeddings"] = "output.weight" not in tensors
    for which in ("bos", "eos", "padding"):
        value = metadata.get(f"tokenizer.ggml.{which}_token_id")
        if value is not None:
            config["pad_token_id" if which == "padding" else f"{which}_token_id"] = value
    return {k: v for k, v in config.items() if v is not None}
