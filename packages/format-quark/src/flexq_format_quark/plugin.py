"""AMD Quark safetensors exports: FP8 per tensor / per channel, int4/uint4 per group, MXFP4.

The ``quark`` format as one :class:`flexq.formatkit.Format` (the entry point
``flexq_format_quark.plugin:plugin`` in the group ``flexq`` names it), over
:mod:`flexq_format_quark.detect` (which linears and schemes, from config and
headers), :mod:`flexq_format_quark.plan` (local read plans) and
:mod:`flexq_format_quark.decode` (the math). Biases, activation scales
(``input_scale``) and unquantized tensors pass through.
"""

from __future__ import annotations

from flexq.formatkit import Format
from flexq_format_quark.config import FORMAT_NAME
from flexq_format_quark.decode import dequantize
from flexq_format_quark.detect import analyze
from flexq_format_quark.plan import local_plan

__all__ = ["plugin"]

plugin = Format(
    FORMAT_NAME,
    "AMD Quark exports (FP8 per tensor/channel, int4/uint4 per group, MXFP4) -> X.weight.",
    methods=("quark",),
    analyze=analyze,
    plan=local_plan,
    decode=dequantize,
    api_version="1.0",
)
