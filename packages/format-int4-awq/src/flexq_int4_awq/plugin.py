"""AutoAWQ INT4 (GEMM and GEMV layouts): qweight/qzeros/scales -> X.weight [out, in].

The ``int4-awq`` format as one :class:`flexq.formatkit.Format` (the entry point
``flexq_int4_awq.plugin:plugin`` in the group ``flexq`` names it), over the
modules that do the work: :mod:`flexq_int4_awq.detect` (which linears, from
config and headers), :mod:`flexq_int4_awq.plan` (local read plans),
:mod:`flexq_int4_awq.decode` (the math) and :mod:`flexq_int4_awq.encode`
(checkpoints for the demo). ``X.bias`` and unquantized tensors are left to pass
through.

The entry point imports only this module and :mod:`flexq_int4_awq.identity`: the parts are
``"module:attribute"`` references, imported when a checkpoint of the format is
composed (:class:`flexq.formatkit.Format`).
"""

from __future__ import annotations

from typing import Any

from flexq.formatkit.format import Format
from flexq_int4_awq.identity import FORMAT_NAME

__all__ = ["plugin"]

plugin: Format[Any] = Format(
    FORMAT_NAME,
    "AutoAWQ INT4 (GEMM and GEMV layouts): qweight/qzeros/scales -> X.weight [out, in].",
    methods=("awq",),
    analyze="flexq_int4_awq.detect:analyze",
    plan="flexq_int4_awq.plan:local_plan",
    decode="flexq_int4_awq.decode:decode",
    encode="flexq_int4_awq.encode:encode",
    api_version="1.2",
)
