"""NVFP4: compressed-tensors ``nvfp4-pack-quantized``, NVIDIA ModelOpt ``NVFP4`` and auto-round.

The ``nvfp4`` format as one :class:`flexq.formatkit.Format` (entry point
``nvfp4 = "flexq_nvfp4.plugin:plugin"``). Detection lives in
:mod:`flexq_nvfp4.detect`, plans in :mod:`flexq_nvfp4.plan`, the math in
:mod:`flexq_nvfp4.decode`, the encoder in :mod:`flexq_nvfp4.encode`.

auto-round also names GPTQ-style integer checkpoints; this format claims only its
NVFP4 tensors (the core matches a method when any format claiming it finds tensors).
"""

from __future__ import annotations

from functools import partial

from flexq.formatkit import Encoder, Format
from flexq_nvfp4.config import CT_FORMAT, FORMAT
from flexq_nvfp4.decode import dequantize_box
from flexq_nvfp4.detect import analyze
from flexq_nvfp4.encode import CT_NVFP4_CONFIG, quantize
from flexq_nvfp4.plan import local_plan

FORMAT_NAME = FORMAT

#: Smallest logits cosine similarity promised for a model loaded from NVFP4 weights
#: (E2M1 keeps one mantissa bit per element; E4M3 block scales per 16).
MIN_LOGITS_COSINE = 0.90

plugin = Format(
    FORMAT,
    "NVFP4: compressed-tensors `nvfp4-pack-quantized`, NVIDIA ModelOpt `NVFP4` and auto-round.",
    methods=(f"compressed-tensors/{CT_FORMAT}", "modelopt", "auto-round"),
    analyze=analyze,
    plan=local_plan,
    decode=dequantize_box,
    # flexq_encode: compressed-tensors nvfp4-pack-quantized tensors and config
    encode=Encoder(
        partial(quantize, layout="compressed-tensors"),
        {"quantization_config": CT_NVFP4_CONFIG},
        MIN_LOGITS_COSINE,
    ),
    api_version="1.0",
)
