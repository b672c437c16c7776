"""What ``flexq_encode`` writes for the bitsandbytes format, for ``flexq demo`` and the tests.

Its own module so that the entry point (:mod:`flexq_bitsandbytes.plugin`) stays cheap to import.
"""

from __future__ import annotations

from functools import partial

from flexq.formatkit import Encoder
from flexq_bitsandbytes.encode import quantization_config, quantize

#: Smallest logits cosine similarity promised for a model loaded from NF4 weights
#: with double quantization (16 levels per block of 64, absmax coded in 8 bits).
MIN_LOGITS_COSINE = 0.93

#: NF4 with double quantization, as transformers saves it.
encode = Encoder(
    partial(quantize, mode="nf4", double_quant=True),
    {"quantization_config": quantization_config("nf4")},
    MIN_LOGITS_COSINE,
)
