"""The tiny base model every producer quantizes, and what a builder returns.

A random LlamaForCausalLM in bfloat16: hidden 128, intermediate 256, 2 layers,
4 heads of 32 (2 KV heads), vocabulary 256, untied lm_head. Its shapes make
group sizes 32/64/128 and FP8 128x128 blocks apply (q/o: 128x128, k/v: 64x128,
gate/up: 256x128, down: 128x256). A word-level tokenizer over ``t4 .. t255``
is saved beside it, because llm-compressor, auto-round and AutoAWQ want one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Nothing may reach the hub: every producer reads only local directories.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

VOCAB = 256
SEQ = 32
SAMPLES = 4
PROJS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)
LAYERS = 2
#: Every Linear the producers quantize (lm_head stays unquantized everywhere).
LINEARS = tuple(f"model.layers.{i}.{p}" for i in range(LAYERS) for p in PROJS)


@dataclass
class Built:
    """One producer's checkpoint and its own view of it.

    :ivar path: the directory holding config.json and the safetensors files.
    :ivar reference: logical key (``X.weight``, ``[out, in]``) -> the producer's
        own float32 dequantization.
    :ivar passthrough: tensor key -> the base model's own value (float32) for
        every tensor the producer left unquantized.
    """

    path: Path
    reference: dict[str, np.ndarray]
    passthrough: dict[str, np.ndarray] = field(default_factory=dict)


def build_base(directory: Path) -> Path:
    """Save the random tiny model and its tokenizer into ``directory``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=2 * SEQ,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        # Random (not all-ones) norms, so a passthrough mix-up cannot hide.
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
    model.save_pretrained(directory)
    # Special tokens must not be prefixes of words: added tokens match inside words.
    specials = ["<unk>", "<pad>", "<s>", "</s>"]
    vocab = {w: i for i, w in enumerate(specials)} | {f"t{i}": i for i in range(4, VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
    )
    fast.save_pretrained(directory)
    return directory


def load_base(base: Path) -> Any:
    """A fresh bfloat16 copy of the base model (producers modify what they get)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)


def calibration_texts() -> list[str]:
    """Tiny calibration data: random token ids spelled as the tokenizer's words."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(4, VOCAB, (SAMPLES, SEQ), generator=gen)
    return [" ".join(f"t{i}" for i in row.tolist()) for row in ids]


def calibration_dataset() -> Any:
    """The calibration data as a tokenized ``datasets.Dataset`` (llm-compressor)."""
    from datasets import Dataset

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(4, VOCAB, (SAMPLES, SEQ), generator=gen)
    return Dataset.from_dict(
        {"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()}
    )


def base_tensors(base: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the base checkpoint."""
    return read_safetensors(base)


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of every safetensors file under ``directory``."""
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob("*.safetensors")):
        out.update(load_file(file))
    return out


def quantization_config(directory: Path) -> dict[str, Any]:
    """``quantization_config`` of the checkpoint's config.json."""
    config = json.loads((directory / "config.json").read_text())
    qc = config.get("quantization_config")
    assert isinstance(qc, dict), f"{directory}: config.json has no quantization_config"
    return qc


def f32(x: torch.Tensor) -> np.ndarray:
    """A torch tensor as a float32 numpy array (exact for every narrower float)."""
    return np.asarray(x.detach().to(torch.float32).cpu().contiguous().numpy(), dtype=np.float32)


def passthrough_of(
    base: Path | dict[str, torch.Tensor], ckpt: Path, quantized_prefixes: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """The model's own value of every tensor in ``ckpt`` outside the quantized modules.

    ``base`` is the base checkpoint, or the producer's in-memory state dict when
    the producer changes unquantized tensors itself (AWQ folds its scales into the
    norms).
    """
    own = base_tensors(base) if isinstance(base, Path) else base
    saved = read_safetensors(ckpt)
    out = {}
    for key in saved:
        if any(key.startswith(prefix + ".") for prefix in quantized_prefixes):
            continue
        if key in own:
            out[key] = f32(own[key])
    return out


def checkpoint_dir(output: Path) -> Path:
    """The directory under ``output`` holding config.json (auto-round adds a subfolder)."""
    if (output / "config.json").is_file():
        return output
    found = sorted(p.parent for p in output.rglob("config.json"))
    assert len(found) == 1, f"{output}: expected one config.json, found {found}"
    return found[0]
