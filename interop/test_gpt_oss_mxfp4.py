"""gpt-oss MXFP4 expert tensors against transformers' own dequantizer.

transformers 5.17 cannot quantize to MXFP4 on CPU (``quantize_to_mxfp4`` needs
the hub-downloaded ``triton_kernels``), so the blocks here are random bytes
(every byte is two valid E2M1 codes) with E8M0 scales around 2^0; the oracle is
``transformers.integrations.mxfp4.convert_moe_packed_tensors`` in float32,
which returns the expert weight as ``[E, in, out]`` (its module layout).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import flexq

from .test_interop import assert_bits_equal, snapshot

EXPERTS, HIDDEN, INTER = 2, 128, 64
PREFIX = "model.layers.0.mlp.experts"
PROJS = {"gate_up_proj": (2 * INTER, HIDDEN), "down_proj": (HIDDEN, INTER)}  # (out, in)


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer gpt-oss-style checkpoint: MXFP4 expert blocks/scales plus BF16 biases."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(3)
    tensors = {}
    for proj, (out, inp) in PROJS.items():
        tensors[f"{PREFIX}.{proj}_blocks"] = torch.randint(
            0, 256, (EXPERTS, out, inp // 32, 16), generator=gen, dtype=torch.uint8
        )
        tensors[f"{PREFIX}.{proj}_scales"] = torch.randint(
            119, 131, (EXPERTS, out, inp // 32), generator=gen, dtype=torch.uint8
        )
        tensors[f"{PREFIX}.{proj}_bias"] = torch.randn(EXPERTS, out, generator=gen).to(
            torch.bfloat16
        )
    path = tmp_path_factory.mktemp("gpt-oss")
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "model_type": "gpt_oss",
        "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]},
    }
    (path / "config.json").write_text(json.dumps(config))
    return path


def reference(path: Path, proj: str) -> np.ndarray:
    """transformers' float32 dequantization of one expert projection, ``[E, in, out]``."""
    from safetensors.torch import load_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    t = load_file(str(path / "model.safetensors"))
    w = convert_moe_packed_tensors(
        t[f"{PREFIX}.{proj}_blocks"], t[f"{PREFIX}.{proj}_scales"], dtype=torch.float32
    )
    return np.asarray(w.numpy())


@pytest.mark.parametrize("proj", sorted(PROJS))
def test_expert_tensor_is_transformers_dequantization(gpt_oss: Path, proj: str) -> None:
    before = snapshot(gpt_oss)
    ct = flexq.compose(gpt_oss)
    key = f"{PREFIX}.{proj}"
    want = reference(gpt_oss, proj)
    out, inp = PROJS[proj]
    assert want.shape == (EXPERTS, inp, out)
    assert key in ct.entries, sorted(ct.entries)
    assert ct.entries[key].shape == want.shape, f"{key}: flexq {ct.entries[key].shape}"
    assert_bits_equal(ct.load(key, "float32"), want, key)
    bias = f"{key}_bias"
    assert ct.entries[bias].is_passthrough
    assert snapshot(gpt_oss) == before
