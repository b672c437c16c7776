"""bitsandbytes: NF4/FP4 4-bit (with or without double quantization) and LLM.int8 weights.

The ``bitsandbytes`` format as one :class:`flexq.formatkit.Format` (entry point
``bitsandbytes = "flexq_bitsandbytes.plugin:plugin"``). Detection lives in
:mod:`flexq_bitsandbytes.detect`, plans in :mod:`flexq_bitsandbytes.plan`, the
math in :mod:`flexq_bitsandbytes.decode`.
"""

from __future__ import annotations

from functools import partial

from flexq.formatkit import Encoder, Format
from flexq_bitsandbytes.config import FORMAT
from flexq_bitsandbytes.decode import dequantize
from flexq_bitsandbytes.detect import analyze
from flexq_bitsandbytes.encode import quantization_config, quantize
from flexq_bitsandbytes.plan import local_plan

FORMAT_NAME = FORMAT

#: Smallest logits cosine similarity promised for a model loaded from NF4 weights
#: with double quantization (16 levels per block of 64, absmax coded in 8 bits).
MIN_LOGITS_COSINE = 0.93

plugin = Format(
    FORMAT,
    "bitsandbytes: NF4/FP4 4-bit (with or without double quantization) and LLM.int8 weights.",
    methods=(FORMAT,),
    analyze=analyze,
    plan=local_plan,
    decode=dequantize,
    # flexq_encode: NF4 with double quantization, as transformers saves it
    encode=Encoder(
        partial(quantize, mode="nf4", double_quant=True),
        {"quantization_config": quantization_config("nf4")},
        MIN_LOGITS_COSINE,
    ),
    api_version="1.0",
)
