"""A hybrid checkpoint (gpt-oss style: MXFP4 experts, block-FP8 attention, BF16 rest) with every
installed format at once: each tensor gets exactly one owner and decodes exactly."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import paddle

import flexq
import flexq_fp8
import flexq_mxfp4
from flexq.formatkit.rounding import float32_to_bfloat16_bits

if TYPE_CHECKING:
    from pathlib import Path

EXPERTS = "model.layers.0.mlp.experts.down_proj"
Q_PROJ = "model.layers.0.self_attn.q_proj.weight"
NORM = "model.norm.weight"


def test_mxfp4_experts_and_fp8_attention_compose_and_load(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    experts = rng.standard_normal((2, 64, 96)).astype(np.float32)
    q = rng.standard_normal((64, 64)).astype(np.float32)
    tensors = {
        **flexq_mxfp4.quantize({EXPERTS: experts}),  # gpt-oss: *_blocks + *_scales (U8)
        **flexq_fp8.quantize(q, layout="block", block_size=(32, 32), key=Q_PROJ),
        NORM: flexq.RawTensor("BF16", float32_to_bfloat16_bits(np.ones(64, np.float32))),
    }
    ckpt = flexq.save_checkpoint(tmp_path / "hybrid", tensors)
    ct = flexq.compose(ckpt)  # every installed format, strict
    owners = {k: e.owner for k, e in ct.entries.items()}
    assert owners == {EXPERTS: "mxfp4", Q_PROJ: "fp8", NORM: "passthrough"}
    sd = {
        "experts": paddle.zeros([2, 64, 96]),
        "q": paddle.zeros([64, 64]),
    }
    flexq.load_state_dict(
        sd, ckpt, aoa_config={"aoa_statements": [f"{EXPERTS} -> experts", f"{Q_PROJ} -> q"]}
    )
    np.testing.assert_array_equal(sd["experts"].numpy(), ct.load(EXPERTS, "float32"))
    np.testing.assert_array_equal(sd["q"].numpy(), ct.load(Q_PROJ, "float32"))
    # the decoded values are the encoders' inputs up to their quantization steps
    assert np.abs(sd["q"].numpy() - q).max() <= np.abs(q).max() / 8
    assert np.abs(sd["experts"].numpy() - experts).max() <= np.abs(experts).max() / 2
