"""AutoAWQ INT4 (GEMM and GEMV layouts): qweight/qzeros/scales -> X.weight [out, in].

The ``int4-awq`` format as one :class:`flexq.formatkit.Format` (the entry point
``flexq_int4_awq.plugin:plugin`` in the group ``flexq`` names it), over the
modules that do the work: :mod:`flexq_int4_awq.detect` (which linears, from
config and headers), :mod:`flexq_int4_awq.plan` (local read plans),
:mod:`flexq_int4_awq.decode` (the math) and :mod:`flexq_int4_awq.encode`
(checkpoints for the demo). ``X.bias`` and unquantized tensors are left to pass
through.
"""

from __future__ import annotations

from flexq.formatkit import Format
from flexq_int4_awq.config import FORMAT_NAME
from flexq_int4_awq.decode import dequantize
from flexq_int4_awq.detect import analyze
from flexq_int4_awq.encode import encode
from flexq_int4_awq.plan import local_plan

__all__ = ["plugin"]

plugin = Format(
    FORMAT_NAME,
    "AutoAWQ INT4 (GEMM and GEMV layouts): qweight/qzeros/scales -> X.weight [out, in].",
    methods=("awq",),
    analyze=analyze,
    plan=local_plan,
    decode=dequantize,
    encode=encode,
    api_version="1.0",
)
