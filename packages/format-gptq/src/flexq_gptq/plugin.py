"""GPTQ (AutoGPTQ, GPTQModel, optimum, auto-round): qweight, qzeros, scales, g_idx -> X.weight.

The ``gptq`` format as one :class:`flexq.formatkit.Format` (entry point
``gptq = "flexq_gptq.plugin:plugin"`` in the group ``flexq``): detection in
:mod:`flexq_gptq.detect`, plans in :mod:`flexq_gptq.plan`, the math in
:mod:`flexq_gptq.decode`, the demo encoder below. ``X.bias`` and unquantized
tensors are left to pass through.

The entry point imports only this module and :mod:`flexq_gptq.identity`: the parts are
``"module:attribute"`` references, imported when a checkpoint of the format is
composed (:class:`flexq.formatkit.Format`); ``flexq_encode`` is :mod:`flexq_gptq.demo`'s.
"""

from __future__ import annotations

from typing import Any

from flexq.formatkit.format import Format
from flexq.formatkit.lazy import exports
from flexq_gptq.identity import AUTO_ROUND_METHODS, FORMAT_NAME, GPTQ_METHODS

plugin: Format[Any] = Format(
    FORMAT_NAME,
    "GPTQ (AutoGPTQ, GPTQModel, optimum, auto-round): qweight, qzeros, scales, g_idx -> X.weight.",
    methods=(*GPTQ_METHODS, *AUTO_ROUND_METHODS),
    analyze="flexq_gptq.detect:analyze",
    plan="flexq_gptq.plan:local_plan",
    decode="flexq_gptq.decode:decode",
    encode="flexq_gptq.demo:encode",
    api_version="1.2",
)

__getattr__ = exports(
    __name__,
    {
        n: "flexq_gptq.demo"
        for n in ("MIN_LOGITS_COSINE", "DEMO_BITS", "DEMO_GROUP_SIZE", "demo_tensors")
    },
)
