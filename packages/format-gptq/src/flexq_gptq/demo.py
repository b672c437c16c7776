"""What ``flexq_encode`` writes for the GPTQ format, for ``flexq demo`` and the tests.

Its own module so that the entry point (:mod:`flexq_gptq.plugin`) stays cheap to import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from flexq.formatkit import Encoder
from flexq_gptq.encode import quantization_config, quantize

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


encode = Encoder(
    demo_tensors,
    {"quantization_config": quantization_config(DEMO_BITS, DEMO_GROUP_SIZE, desc_act=True)},
    MIN_LOGITS_COSINE,
)
