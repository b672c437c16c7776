"""bitsandbytes: NF4/FP4 4-bit (with or without double quantization) and LLM.int8 weights.

The ``bitsandbytes`` format as one :class:`flexq.formatkit.Format` (entry point
``bitsandbytes = "flexq_bitsandbytes.plugin:plugin"``). Detection lives in
:mod:`flexq_bitsandbytes.detect`, plans in :mod:`flexq_bitsandbytes.plan`, the
math in :mod:`flexq_bitsandbytes.decode`.

The entry point imports only this module and :mod:`flexq_bitsandbytes.identity`: the parts are
``"module:attribute"`` references, imported when a checkpoint of the format is
composed (:class:`flexq.formatkit.Format`); ``flexq_encode`` is :mod:`flexq_bitsandbytes.demo`'s.
"""

from __future__ import annotations

from typing import Any

from flexq.formatkit.format import Format
from flexq.formatkit.lazy import exports
from flexq_bitsandbytes.identity import FORMAT

FORMAT_NAME = FORMAT

plugin: Format[Any] = Format(
    FORMAT,
    "bitsandbytes: NF4/FP4 4-bit (with or without double quantization) and LLM.int8 weights.",
    methods=(FORMAT,),
    analyze="flexq_bitsandbytes.detect:analyze",
    plan="flexq_bitsandbytes.plan:local_plan",
    decode="flexq_bitsandbytes.decode:decode",
    encode="flexq_bitsandbytes.demo:encode",
    api_version="1.2",
)

__getattr__ = exports(__name__, {"MIN_LOGITS_COSINE": "flexq_bitsandbytes.demo"})
