"""Models and checkpoints for the PaddleFormers tests (``nox -s paddleformers``).

For every supported class: a tiny randomly initialised bf16 model, the HF-format
checkpoint PaddleFormers' own ``save_pretrained`` writes, its FP8 / AWQ / MXFP4
twins, and each twin's dequantized copy (``flexq convert --dtype float32``), which
PaddleFormers' own ``from_pretrained`` loads as the reference. Built once per
session, lazily; paddleformers is imported only when a test asks (the test
module skips itself without it).

The twins are written by flexq's own encoders: the real producers (llm-compressor,
AutoAWQ, transformers' quantizers) need torch and transformers >= 5.17, which do
not install beside paddleformers 1.2.0 (it pins transformers 5.3 and numpy
1.26.4); the encoders write the same layouts (notes/formats.md). What each twin
quantizes follows the published checkpoints of the model family:

- ``fp8``: every ``*proj.weight`` linear, 128x128 blocks (``weight_scale_inv``,
  DeepSeek / Qwen3-FP8 layout); gpt-oss: its attention linears; ``fp8-b16`` / ``fp8-b32``
  the same with 16x16 / 32x32 blocks (for kept fused weights);
- ``awq``: the same linears, GEMM layout, group 32;
- ``mxfp4``: gpt-oss's own layout for its experts (``*_blocks`` / ``*_scales``
  over ``[E, out, in]``, logical ``[E, in, out]``; attention and router stay bf16, as openai/gpt-oss
  ships); compressed-tensors ``mxfp4-pack-quantized`` linears for the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq.cli.convert import convert
from flexq.formatkit.rounding import bfloat16_bits_to_float32
from flexq.plugin.manager import registry

#: what every tiny model shares: a 128-token vocabulary, 64 wide, two layers, GQA 4:2.
TINY: dict[str, Any] = {
    "vocab_size": 128,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
#: class name -> config overrides (small, but with every structural feature: GQA,
#: tied / untied lm_head, dense and MoE layers, shared experts, biases, sinks).
CONFIGS: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {
        **TINY,
        "intermediate_size": 128,
        "tie_word_embeddings": False,
    },
    "GptOssForCausalLM": {
        **TINY,
        "intermediate_size": 96,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": 8,
    },
    "Ernie4_5ForCausalLM": {
        **TINY,
        "intermediate_size": 128,
        "head_dim": 16,
        "tie_word_embeddings": True,
    },
    "Ernie4_5_MoeForCausalLM": {
        **TINY,
        "intermediate_size": 128,
        "moe_num_experts": 4,
        "moe_k": 2,
        "moe_intermediate_size": 64,
        "moe_num_shared_experts": 1,
        "moe_layer_start_index": 1,
        "tie_word_embeddings": False,
    },
    # HF's Phi-3 stores qkv_proj and gate_up_proj fused already: AOA's fused_qkv_old and
    # the one-source fused_ffn re-lay them out (per rank under tensor parallelism).
    "Phi3ForCausalLM": {
        **TINY,
        "intermediate_size": 128,
        "tie_word_embeddings": False,
    },
}
CLASSES = list(CONFIGS)


def model_class(name: str) -> Any:
    import paddleformers.transformers as pft

    return getattr(pft, name)


def build(name: str, seed: int = 0) -> Any:
    """A randomly initialised bfloat16 model of class ``name`` (weights scaled like a trained one)."""
    import paddle

    cls = model_class(name)
    config = cls.config_class(**CONFIGS[name])
    config.dtype = "bfloat16"
    paddle.seed(seed)
    old = paddle.get_default_dtype()
    paddle.set_default_dtype("bfloat16")
    try:
        model = cls(config)
    finally:
        paddle.set_default_dtype(old)
    return model


def save_bf16(name: str, directory: Path, seed: int = 0) -> Path:
    """``build(name)`` saved by PaddleFormers' ``save_pretrained`` (HF layout, BF16)."""
    model = build(name, seed)
    model.save_pretrained(str(directory))
    for stray in directory.glob("saved_signal_*"):
        stray.unlink()  # PaddleFormers' multi-rank save marker, not part of the checkpoint
    return directory


FORMATS = ["fp8", "awq", "mxfp4"]
#: FP8 twins ``fp8-b{B}`` with B x B blocks: ``fp8-b16`` has blocks one head (16) wide, as a
#: real model's 128 blocks are one 128-wide head, so fused qkv / gate_up pieces fall on
#: block edges; in ``fp8-b32`` one kv head is half a block.
HEAD_BLOCKS = "fp8-b16"
#: format name -> the flexq format package that encodes it.
ENCODER = {"fp8": "fp8", "awq": "int4-awq", "mxfp4": "mxfp4"}
GPT_OSS_EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


def _float32(ckpt: flexq.Checkpoint, key: str) -> np.ndarray:
    info = ckpt.info(key)
    raw = ckpt.read(key)
    return bfloat16_bits_to_float32(raw) if info.dtype == "BF16" else raw.astype(np.float32)


def _is_linear(key: str, shape: tuple[int, ...]) -> bool:
    return key.endswith("proj.weight") and len(shape) == 2


def write_twin(bf16: Path, fmt: str, directory: Path) -> Path:
    """The ``fmt`` twin of checkpoint ``bf16`` in ``directory`` (config.json kept, plus
    the format's ``quantization_config``)."""
    ckpt = flexq.Checkpoint(bf16)
    model_config: dict[str, Any] = dict(ckpt.config)
    gpt_oss = model_config.get("model_type") == "gpt_oss"
    if fmt == "mxfp4" and gpt_oss:
        _write_gpt_oss_mxfp4(ckpt, directory)
    else:
        weights, others = {}, {}
        for key, info in ckpt.tensors.items():
            if _is_linear(key, info.shape) and not (gpt_oss and ".mlp." in key):
                weights[key] = _float32(ckpt, key)
            else:
                others[key] = flexq.RawTensor(info.dtype, ckpt.read(key))
        if fmt.startswith("fp8-b"):
            from flexq_fp8 import save_fp8_checkpoint

            b = int(fmt.removeprefix("fp8-b"))
            save_fp8_checkpoint(
                directory, weights, layout="block", block_size=(b, b), others=others
            )
        else:
            registry.encode(ENCODER[fmt], directory, weights, others)
    written = json.loads((directory / "config.json").read_text())
    model_config["quantization_config"] = written["quantization_config"]
    (directory / "config.json").write_text(json.dumps(model_config, indent=2))
    return directory


def _write_gpt_oss_mxfp4(ckpt: flexq.Checkpoint, directory: Path) -> None:
    from flexq_mxfp4.encode import GPT_OSS_NOT_CONVERTED, quantize

    tensors: dict[str, flexq.RawTensor] = {}
    for key, info in ckpt.tensors.items():
        if key.endswith(GPT_OSS_EXPERTS):
            # HF keeps [E, in, out], the logical layout the gpt-oss encoder takes (its
            # blocks hold [E, out, in] along in).
            tensors.update(quantize({key: _float32(ckpt, key)}, layout="gpt-oss"))
        else:
            tensors[key] = flexq.RawTensor(info.dtype, ckpt.read(key))
    config = {"quant_method": "mxfp4", "modules_to_not_convert": GPT_OSS_NOT_CONVERTED}
    flexq.save_checkpoint(directory, tensors, config={"quantization_config": config})


class Checkpoints:
    """Lazily built checkpoints under one session directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def bf16(self, name: str) -> Path:
        path = self.root / name / "bf16"
        if not path.exists():
            save_bf16(name, path)
        return path

    def twin(self, name: str, fmt: str) -> Path:
        path = self.root / name / fmt
        if not path.exists():
            write_twin(self.bf16(name), fmt, path)
        return path

    def dequantized(self, name: str, fmt: str) -> Path:
        path = self.root / name / f"{fmt}-dequantized"
        if not path.exists():
            convert(self.twin(name, fmt), path, dtype="float32")
        return path


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Checkpoints:
    return Checkpoints(tmp_path_factory.mktemp("paddleformers"))


@pytest.fixture(autouse=True)
def fresh_flexcheckpoint_metadata() -> Iterator[None]:
    """FlexCheckpoint keeps the metadata of a failed load in a global, which the next
    load in the process would reuse: clear it around every test."""
    from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd

    lsd._metadata_manager.clear()
    yield
    lsd._metadata_manager.clear()
