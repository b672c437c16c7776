"""``flexq.paddleformers.from_pretrained(..., keep_quantized=True)`` on tiny models.

Llama from its FP8 128x128-block twin: every quantized linear is a
``flexq.nn.QuantizedLinear`` holding the checkpoint's own bytes, logits equal the
dequantized model's bit for bit (both run float32 matmuls on CPU), and the
parameters take exactly the kept bytes. gpt-oss from its MXFP4 twin: its stacked
experts stay MXFP4 and logits equal the dequantized model's. Fused-QKV models
(Phi-3) are refused.
Run by ``nox -s paddleformers``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddleformers")

import paddle

import flexq
import flexq.paddleformers
from flexq.errors import FlexqError
from flexq.nn import QuantizedLinear

from .conftest import Checkpoints, model_class
from .test_paddleformers import logits

LLAMA = "LlamaForCausalLM"
#: q, k, v, o, gate, up, down in each of the 2 layers (lm_head and embeddings stay float).
KEPT_PER_MODEL = 14


def parameter_bytes(model: Any) -> int:
    return sum(int(np.prod(p.shape)) * p.element_size() for p in model.parameters())


def kept_and_dequantized(checkpoints: Checkpoints, name: str, dtype: str) -> tuple[Any, Any]:
    """``name`` from its FP8 twin, kept and dequantized."""
    twin = checkpoints.twin(name, "fp8")
    cls = model_class(name)
    return (
        flexq.paddleformers.from_pretrained(cls, twin, dtype=dtype, keep_quantized=True),
        flexq.paddleformers.from_pretrained(cls, twin, dtype=dtype),
    )


def kept_layers(model: Any) -> dict[str, QuantizedLinear]:
    return {n: m for n, m in model.named_sublayers() if isinstance(m, QuantizedLinear)}


def test_llama_fp8_kept_logits_equal_the_dequantized_models(checkpoints: Checkpoints) -> None:
    kept, ref = kept_and_dequantized(checkpoints, LLAMA, "float32")
    layers = kept_layers(kept)
    assert len(layers) == KEPT_PER_MODEL
    with flexq.Checkpoint(checkpoints.twin(LLAMA, "fp8")) as ckpt:
        for layer in layers.values():
            assert layer.logical_key is not None
            stored = ckpt.read(layer.logical_key)  # the F8 bytes, [out, in]: no ^T
            assert layer.weight.view(paddle.uint8).numpy().tobytes() == stored.tobytes()
    np.testing.assert_array_equal(logits(kept, LLAMA), logits(ref, LLAMA))


def test_llama_fp8_kept_parameters_hold_the_kept_bytes(checkpoints: Checkpoints) -> None:
    """FP8 values (1 byte) + float32 128x128 scales for the linears, bf16 for the rest."""
    kept, bf16 = kept_and_dequantized(checkpoints, LLAMA, "bfloat16")
    layers = kept_layers(kept)
    linear = sum(int(np.prod(m.weight.shape)) for m in layers.values())
    scales = sum(int(np.prod(m.scales.shape)) for m in layers.values())
    assert parameter_bytes(kept) == parameter_bytes(bf16) - linear + 4 * scales
    # tiny model: embeddings and lm_head (bf16) are a third of it; a real one is ~0.5x.
    assert parameter_bytes(kept) / parameter_bytes(bf16) < 0.6


def test_gpt_oss_fp8_attention_is_kept(checkpoints: Checkpoints) -> None:
    name = "GptOssForCausalLM"
    kept, ref = kept_and_dequantized(checkpoints, name, "float32")
    assert len(kept_layers(kept)) == 8  # q, k, v, o in 2 layers
    np.testing.assert_array_equal(logits(kept, name), logits(ref, name))


def test_phi3_fused_qkv_and_gate_up(checkpoints: Checkpoints) -> None:
    """Phi-3's checkpoint stores qkv_proj / gate_up_proj fused already; PaddleFormers'
    fused_qkv_old / fused_ffn rules re-lay them out, which a kept weight cannot follow
    yet: refused, naming the fused target, before anything is read."""
    name = "Phi3ForCausalLM"
    with pytest.raises(FlexqError, match="fused"):
        flexq.paddleformers.from_pretrained(
            model_class(name), checkpoints.twin(name, "fp8"), dtype="float32", keep_quantized=True
        )


def test_gpt_oss_mxfp4_experts_are_kept(checkpoints: Checkpoints) -> None:
    """gpt-oss's MXFP4 experts stay the checkpoint's bytes ([E, out, in/2] and E8M0
    [E, out, in/32]); the forward decodes them with flexq_mxfp4 and gives the dequantized
    model's logits bit for bit; attention and router stay float."""
    name = "GptOssForCausalLM"
    twin = checkpoints.twin(name, "mxfp4")
    cls = model_class(name)
    kept = flexq.paddleformers.from_pretrained(cls, twin, dtype="float32", keep_quantized=True)
    ref = flexq.paddleformers.from_pretrained(cls, twin, dtype="float32")
    state = kept.state_dict()
    with flexq.Checkpoint(twin) as ckpt:
        for layer in range(2):
            for proj in ("gate_up_proj", "down_proj"):
                key = f"model.layers.{layer}.mlp.experts.{proj}"
                assert key not in state  # no dense copy is held
                blocks = state[f"{key}_blocks"].numpy()
                assert blocks.tobytes() == ckpt.read(f"{key}_blocks").tobytes()
                assert (
                    state[f"{key}_scales"].numpy().tobytes() == ckpt.read(f"{key}_scales").tobytes()
                )
    np.testing.assert_array_equal(logits(kept, name), logits(ref, name))
    dense = sum(
        int(np.prod(ref.state_dict()[k].shape))
        for k in ref.state_dict()
        if k.endswith(("experts.gate_up_proj", "experts.down_proj"))
    )
    assert parameter_bytes(kept) == parameter_bytes(ref) - 4 * dense + dense // 2 + dense // 32
