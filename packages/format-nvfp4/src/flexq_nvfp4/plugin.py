"""NVFP4: compressed-tensors ``nvfp4-pack-quantized``, NVIDIA ModelOpt ``NVFP4`` and auto-round.

The ``nvfp4`` format as one :class:`flexq.formatkit.Format` (entry point
``nvfp4 = "flexq_nvfp4.plugin:plugin"``). Detection lives in
:mod:`flexq_nvfp4.detect`, plans in :mod:`flexq_nvfp4.plan`, the math in
:mod:`flexq_nvfp4.decode`, the encoder in :mod:`flexq_nvfp4.encode`.

auto-round also names GPTQ-style integer checkpoints; this format claims only its
NVFP4 tensors (the core matches a method when any format claiming it finds tensors).

The entry point imports only this module and :mod:`flexq_nvfp4.identity`: the parts are
``"module:attribute"`` references, imported when a checkpoint of the format is
composed (:class:`flexq.formatkit.Format`); ``flexq_encode`` is :mod:`flexq_nvfp4.demo`'s.
"""

from __future__ import annotations

from typing import Any

from flexq.formatkit.format import Format
from flexq.formatkit.lazy import exports
from flexq_nvfp4.identity import CT_FORMAT, FORMAT

FORMAT_NAME = FORMAT

plugin: Format[Any] = Format(
    FORMAT,
    "NVFP4: compressed-tensors `nvfp4-pack-quantized`, NVIDIA ModelOpt `NVFP4` and auto-round.",
    methods=(f"compressed-tensors/{CT_FORMAT}", "modelopt", "auto-round"),
    analyze="flexq_nvfp4.detect:analyze",
    plan="flexq_nvfp4.plan:local_plan",
    decode="flexq_nvfp4.decode:decode",
    encode="flexq_nvfp4.demo:encode",
    api_version="1.2",
)

__getattr__ = exports(__name__, {"MIN_LOGITS_COSINE": "flexq_nvfp4.demo"})
