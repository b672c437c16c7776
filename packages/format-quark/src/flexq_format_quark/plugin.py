"""AMD Quark safetensors exports: FP8 per tensor / per channel, int4/uint4 per group, MXFP4.

The ``quark`` format as one :class:`flexq.formatkit.Format` (the entry point
``flexq_format_quark.plugin:plugin`` in the group ``flexq`` names it), over
:mod:`flexq_format_quark.detect` (which linears and schemes, from config and
headers), :mod:`flexq_format_quark.plan` (local read plans) and
:mod:`flexq_format_quark.decode` (the math). Biases, activation scales
(``input_scale``) and unquantized tensors pass through.

The entry point imports only this module and :mod:`flexq_format_quark.identity`: the parts are
``"module:attribute"`` references, imported when a checkpoint of the format is
composed (:class:`flexq.formatkit.Format`).
"""

from __future__ import annotations

from typing import Any

from flexq.formatkit.format import Format
from flexq_format_quark.identity import FORMAT_NAME

__all__ = ["plugin"]

plugin: Format[Any] = Format(
    FORMAT_NAME,
    "AMD Quark exports (FP8 per tensor/channel, int4/uint4 per group, MXFP4) -> X.weight.",
    methods=("quark",),
    analyze="flexq_format_quark.detect:analyze",
    plan="flexq_format_quark.plan:local_plan",
    decode="flexq_format_quark.decode:decode",
    api_version="1.2",
)
