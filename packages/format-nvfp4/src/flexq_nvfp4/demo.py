"""What ``flexq_encode`` writes for the NVFP4 format, for ``flexq demo`` and the tests.

Its own module so that the entry point (:mod:`flexq_nvfp4.plugin`) stays cheap to import.
"""

from __future__ import annotations

from functools import partial

from flexq.formatkit import Encoder
from flexq_nvfp4.encode import CT_NVFP4_CONFIG, quantize

#: Smallest logits cosine similarity promised for a model loaded from NVFP4 weights
#: (E2M1 keeps one mantissa bit per element; E4M3 block scales per 16).
MIN_LOGITS_COSINE = 0.90

#: compressed-tensors nvfp4-pack-quantized tensors and config.
encode = Encoder(
    partial(quantize, layout="compressed-tensors"),
    {"quantization_config": CT_NVFP4_CONFIG},
    MIN_LOGITS_COSINE,
)
