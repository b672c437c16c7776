"""llama.cpp's tensor names, layouts and metadata -> Hugging Face names and config.json.

For the analysis (which logical tensor each GGUF tensor is) and the checkpoint's
``config``. It follows transformers' GGUF loader (``integrations/ggml.py``,
``modeling_gguf_pytorch_utils.py``): the same name map, the same config keys, and
the Q/K row permutation llama.cpp's ``convert_hf_to_gguf.py`` applies to
llama-family attention (``LlamaModel.permute``) undone for ``llama`` only, and for the
MoE architectures (``qwen2moe``, ``qwen3moe``) transformers' ``Qwen2MoeTensorProcessor``:
llama.cpp's merged experts ``ffn_gate_exps`` / ``ffn_up_exps`` ``[E, I, H]`` stacked
(gate first) into ``mlp.experts.gate_up_proj`` ``[E, 2I, H]``, ``ffn_down_exps`` as
``mlp.experts.down_proj`` ``[E, H, I]``, the shared expert's gate ``[H]`` as
``[1, H]``. Tensors transformers derives rather than loads (llama3's ``rope_freqs``)
are no HF tensor: :data:`DERIVED`.
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
    "qwen2moe": "Qwen2MoeForCausalLM",
    "qwen3moe": "Qwen3MoeForCausalLM",
}
#: GGUF architecture -> HF ``model_type`` (where the two differ).
MODEL_TYPES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe"}
#: The MoE architectures: their experts' names (:data:`MOE_BLOCK`) and config keys.
MOE = frozenset({"qwen2moe", "qwen3moe"})
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
#: The MoE architectures' config keys: transformers' two, and the experts' sizes, which
#: transformers leaves at the config class's defaults (those of the published models, so
#: any other size would not load; flexq writes what the file says).
MOE_CONFIG_KEYS = {
    "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_shared_feed_forward_length": "shared_expert_intermediate_size",
}
#: Config values transformers sets for a GGUF architecture whatever the file says
#: (GGUF_CONFIG_DEFAULTS_MAPPING: llama.cpp's qwen3moe renormalises the top-k weights).
CONFIG_DEFAULTS: dict[str, dict[str, Any]] = {"qwen3moe": {"norm_topk_prob": True}}
#: GGUF tensors that are no HF tensor: values transformers derives from the config
#: (llama3's rope frequency factors), so its GGUF loader skips them.
DERIVED = frozenset({"rope_freqs.weight"})
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
#: ``blk.N.<part>`` of the MoE architectures: router and shared expert.
MOE_BLOCK = {
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
}
#: llama.cpp's merged experts ``blk.N.<part>.weight`` -> (``model.layers.N.<HF name>``
#: (HF's expert tensors have no ``.weight``), place among the GGUF tensors stacked along
#: dimension 1 into it, how many those are).
EXPERTS = {
    "ffn_gate_exps": ("mlp.experts.gate_up_proj", 0, 2),
    "ffn_up_exps": ("mlp.experts.gate_up_proj", 1, 2),
    "ffn_down_exps": ("mlp.experts.down_proj", 0, 1),
}
#: GGUF vectors HF keeps as one-row matrices (transformers' ``np.expand_dims``).
ROW_VECTORS = frozenset({"ffn_gate_inp_shexp"})
_BLOCK_NAME = re.compile(r"blk\.(?P<n>\d+)\.(?P<part>\w+)\.(?P<kind>weight|bias)")
#: The architectures whose Q/K rows llama.cpp permutes (transformers' LlamaConverter).
PERMUTED = frozenset({"llama"})


@dataclass(frozen=True)
class HFName:
    """The HF tensor a GGUF tensor is.

    :ivar heads: the heads llama.cpp permuted the rows in (None: not permuted).
    :ivar part: its place among the ``of`` GGUF tensors stacked along dimension 1 into
        ``name`` (0 of 1 for a tensor that is the whole of ``name``).
    :ivar unsqueeze: leading dimensions of size 1 the HF tensor has and the GGUF one not.
    """

    name: str
    heads: int | None = None
    part: int = 0
    of: int = 1
    unsqueeze: int = 0


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
    block = {**BLOCK, **MOE_BLOCK} if arch in MOE else BLOCK
    experts = EXPERTS if arch in MOE else {}
    if m is not None and m["part"] in experts and m["kind"] == "weight":
        stacked, part, of = experts[m["part"]]
        return HFName(f"model.layers.{m['n']}.{stacked}", part=part, of=of)
    if m is None or m["part"] not in block:
        raise FormatError(
            f"{where}: GGUF tensor {name!r} has no Hugging Face name for architecture "
            f"{arch!r} (flexq-format-gguf maps {', '.join(GLOBAL)} "
            f"and blk.N.{{{', '.join([*block, *experts])}}})"
        )
    hf = f"model.layers.{m['n']}.{block[m['part']]}.{m['kind']}"
    if m["part"] in ROW_VECTORS:
        return HFName(hf, unsqueeze=1)
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
    config: dict[str, Any] = {
        "architectures": [ARCHITECTURES[arch]],
        "model_type": MODEL_TYPES.get(arch, arch),
        **CONFIG_DEFAULTS.get(arch, {}),
    }
    keys = {**CONFIG_KEYS, **MOE_CONFIG_KEYS} if arch in MOE else CONFIG_KEYS
    for key, hf in keys.items():
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
