"""FP8 E4M3 weights: per-tensor, per-channel, block-wise (ModelOpt fp8_pb_wo) and MXFP8 scales.

The ``fp8`` format as one :class:`flexq.formatkit.Format` (the entry point
``flexq_fp8.plugin:plugin`` in the group ``flexq`` names it), over the modules
that do the work: :mod:`flexq_fp8.detect` (which tensors, from headers and
config), :mod:`flexq_fp8.plan` (local read plans), :mod:`flexq_fp8.decode`
(the math) and :mod:`flexq_fp8.encode` (checkpoints for the demo).

The entry point imports only this module and :mod:`flexq_fp8.identity`: the parts are
``"module:attribute"`` references, imported when a checkpoint of the format is
composed (:class:`flexq.formatkit.Format`).
"""

from __future__ import annotations

from typing import Any

from flexq.formatkit.format import Format
from flexq_fp8.identity import CT_FORMATS, FORMAT_NAME

__all__ = ["plugin"]

plugin: Format[Any] = Format(
    FORMAT_NAME,
    "FP8 E4M3 weights: per-tensor, per-channel, block-wise (ModelOpt fp8_pb_wo) and MXFP8 scales.",
    # auto-round's own FP8 export (data_type fp) stores the same weights and scales.
    methods=(
        "fp8",
        "fbgemm_fp8",
        *(f"compressed-tensors/{f}" for f in CT_FORMATS),
        "modelopt",
        "auto-round",
    ),
    analyze="flexq_fp8.detect:analyze",
    plan="flexq_fp8.plan:local_plan",
    decode="flexq_fp8.decode:decode",
    encode="flexq_fp8.encode:encode",
    api_version="1.2",
)
