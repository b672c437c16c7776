"""GPTQ (AutoGPTQ, GPTQModel, optimum, auto-round): qweight, qzeros, scales, g_idx -> X.weight.

The ``gptq`` format as one :class:`flexq.formatkit.Format` (entry point
``gptq = "flexq_gptq.plugin:plugin"`` in the group ``flexq``): detection in
:mod:`flexq_gptq.detect`, plans in :mod:`flexq_gptq.plan`, the math in
:mod:`flexq_gptq.decode`, the demo encoder below. ``X.bias`` and unquantized
tensors are left to pass through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from flexq.formatkit import Encoder, Format
from flexq_gptq.config import AUTO_ROUND_METHODS, FORMAT_NAME, GPTQ_METHODS
from flexq_gptq.decode import dequantize
from flexq_gptq.detect import analyze
from flexq_gptq.encode import quantization_config, quantize
from flexq_gptq.plan import local_plan

if TYPE_CHECKING:
    from flexq import RawTensor

#: Smallest logits cosine similarity promised for a model loaded from 4-bit GPTQ
#: weights with groups of 32 (16 levels per group, round to nearest).
MIN_LOGITS_COSINE = 0.95
DEMO_BITS = 4
DEMO_GROUP_SIZE = 32


def demo_tensors(weights: Mapping[str, np.ndarray]) -> dict[str, RawTensor]:
    """What ``flexq_encode`` writes: 4-bit, group-32 GPTQ v1 with act-order groups (a
    fixed column permutation per weight), so that every cross-package load exercises
    scattered groups."""
    tensors: dict[str, RawTensor] = {}
    for n, (key, w) in enumerate(weights.items()):
        perm = np.random.default_rng(n).permutation(w.shape[1])
        prefix = key.removesuffix(".weight")
        tensors.update(quantize(w, DEMO_BITS, DEMO_GROUP_SIZE, perm=perm, prefix=prefix))
    return tensors


plugin = Format(
    FORMAT_NAME,
    "GPTQ (AutoGPTQ, GPTQModel, optimum, auto-round): qweight, qzeros, scales, g_idx -> X.weight.",
    methods=(*GPTQ_METHODS, *AUTO_ROUND_METHODS),
    analyze=analyze,
    plan=local_plan,
    decode=dequantize,
    encode=Encoder(
        demo_tensors,
        {"quantization_config": quantization_config(DEMO_BITS, DEMO_GROUP_SIZE, desc_act=True)},
        MIN_LOGITS_COSINE,
    ),
    api_version="1.0",
)
