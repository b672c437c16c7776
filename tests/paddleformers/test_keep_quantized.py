"""``flexq.paddleformers.from_pretrained(..., keep_quantized=True)`` on tiny models.

Llama from its FP8 128x128-block twin: every quantized linear is a
``flexq.nn.QuantizedLinear`` holding the checkpoint's own bytes, logits equal the
dequantized model's bit for bit (both run float32 matmuls on CPU), and the
parameters take exactly the kept bytes. gpt-oss from its MXFP4 twin: its stacked
experts stay MXFP4 and logits equal the dequantized model's. Fused linears (Phi-3's
stored qkv_proj / gate_up_proj, ERNIE-4.5's fused q, k, v and gate, up) are kept
through the model's fuse rules when the pieces fall on blocks, refused otherwise.
Run by ``nox -s paddleformers``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddleformers")

import paddle

import flexq
import flexq.paddleformers
from flexq.nn import QuantizedLinear

from .conftest import HEAD_BLOCKS, Checkpoints, model_class
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


FUSED = {
    # HF's Phi-3 stores qkv_proj / gate_up_proj fused already; PaddleFormers re-lays them
    # out with fused_qkv_old / the one-source fused_ffn (identities on one rank).
    "Phi3ForCausalLM": (
        "self_attn.qkv_proj",
        "self_attn.o_proj",
        "mlp.gate_up_proj",
        "mlp.down_proj",
    ),
    # ERNIE-4.5 fuses Llama-style q, k, v (fused_qkv: head-group interleave) and gate, up.
    "Ernie4_5ForCausalLM": (
        "self_attn.qkv_proj",
        "self_attn.o_proj",
        "mlp.up_gate_proj",
        "mlp.down_proj",
    ),
}
HEAD = 16  # head_dim of the tiny configs, and the block of the fp8-b16 twin


def fused_from_checkpoint(
    ckpt: flexq.Checkpoint, name: str, layer: int, proj: str, what: str
) -> Any:
    """What a fused kept linear must hold (``what``: "" values, "_scale_inv" scales), from
    the checkpoint's own parts: Phi-3's fused tensors as stored; ERNIE-4.5's q, k, v in
    PaddleFormers' head-group order (per kv group: its q heads, its k head, its v head;
    one scale row a head with 16-row blocks) and gate then up."""
    base = f"model.layers.{layer}"
    if name == "Phi3ForCausalLM" or proj not in ("self_attn.qkv_proj", "mlp.up_gate_proj"):
        return ckpt.read(f"{base}.{proj}.weight{what}")
    if proj == "mlp.up_gate_proj":
        return np.concatenate(
            [ckpt.read(f"{base}.mlp.{p}_proj.weight{what}") for p in ("gate", "up")]
        )
    rows = 1 if what else HEAD  # scale rows or value rows a head
    q, k, v = (ckpt.read(f"{base}.self_attn.{p}_proj.weight{what}") for p in "qkv")
    groups = k.shape[0] // rows
    per = q.shape[0] // rows // groups
    parts = []
    for g in range(groups):
        parts += [
            q[g * per * rows : (g + 1) * per * rows],
            k[g * rows : (g + 1) * rows],
            v[g * rows : (g + 1) * rows],
        ]
    return np.concatenate(parts)


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_linears_are_kept_with_the_checkpoints_bytes(
    checkpoints: Checkpoints, name: str
) -> None:
    """A fused qkv / gate_up linear keeps the checkpoint's bytes and scales, moved by the
    model's fuse rule (head-group interleave included); logits equal the dequantized
    model's bit for bit (both run float32 matmuls on CPU)."""
    twin = checkpoints.twin(name, HEAD_BLOCKS)
    cls = model_class(name)
    kept = flexq.paddleformers.from_pretrained(cls, twin, dtype="float32", keep_quantized=True)
    ref = flexq.paddleformers.from_pretrained(cls, twin, dtype="float32")
    layers = kept_layers(kept)
    assert sorted(layers) == sorted(f"model.layers.{i}.{p}" for i in range(2) for p in FUSED[name])
    with flexq.Checkpoint(twin) as ckpt:
        for i in range(2):
            for proj in FUSED[name]:
                layer = layers[f"model.layers.{i}.{proj}"]
                values = layer.weight.view(paddle.uint8).numpy()
                assert values.tobytes() == fused_from_checkpoint(ckpt, name, i, proj, "").tobytes()
                scales = fused_from_checkpoint(ckpt, name, i, proj, "_scale_inv")
                np.testing.assert_array_equal(layer.scales.numpy(), scales)
    np.testing.assert_array_equal(logits(kept, name), logits(ref, name))


@pytest.mark.parametrize(
    ("fmt", "message"),
    [
        ("fp8", r"per-tensor scales never"),  # a 128 block covers a whole tiny tensor
        # 32-row blocks: ERNIE's q heads go two a block, but a kv head is half a block
        ("fp8-b32", r"AOA statement '.*fused_qkv.*' moves .*k_proj.* cuts"),
    ],
)
def test_a_fused_linear_that_cannot_stay_exact_is_refused(
    checkpoints: Checkpoints, fmt: str, message: str
) -> None:
    name = "Ernie4_5ForCausalLM"
    with pytest.raises(flexq.TargetError, match=message):
        flexq.paddleformers.from_pretrained(
            model_class(name), checkpoints.twin(name, fmt), dtype="float32", keep_quantized=True
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


def test_a_failure_in_the_kept_experts_leaves_every_parameter_as_it_was(
    checkpoints: Checkpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpt-oss's kept experts load in the same call as everything else: a copy of the
    MXFP4 twin with other norms and a NaN E8M0 scale in the last layer's experts fails
    (non-finite scales made errors, as users can ask), and no parameter (attention, norms, embeddings, the experts of every layer) has
    changed, bit for bit."""
    name = "GptOssForCausalLM"
    twin = checkpoints.twin(name, "mxfp4")
    model = flexq.paddleformers.from_pretrained(
        model_class(name), twin, dtype="float32", keep_quantized=True
    )
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    bad = tmp_path / "bad"
    shutil.copytree(twin, bad)
    with flexq.Checkpoint(twin) as ckpt:
        norm = ckpt.info("model.layers.0.input_layernorm.weight")
        scales = ckpt.info("model.layers.1.mlp.experts.down_proj_scales")
    with (bad / norm.file).open("r+b") as f:
        f.seek(norm.start)
        f.write(np.full(norm.nbytes // 2, 0x4000, "<u2").tobytes())  # bf16 2.0: a new norm
    with (bad / scales.file).open("r+b") as f:
        f.seek(scales.start + scales.nbytes - 1)
        f.write(b"\xff")  # E8M0 NaN
    monkeypatch.setenv("FLEXQ_NONFINITE_SCALES", "error")
    with pytest.raises(flexq.FlexqError, match=r"down_proj"):
        flexq.paddleformers.load(model, bad)
    after = model.state_dict()
    assert before.keys() == after.keys()
    for k, v in before.items():
        assert after[k].numpy().tobytes() == v.tobytes(), k
