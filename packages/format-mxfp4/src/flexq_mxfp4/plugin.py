"""OCP MXFP4: gpt-oss `*_blocks`/`*_scales` and compressed-tensors `mxfp4-pack-quantized`.

The ``mxfp4`` format as one :class:`flexq.formatkit.Format` (the entry point
``flexq_mxfp4.plugin:plugin`` names it), over the modules that do the work:
:mod:`flexq_mxfp4.detect` (which tensors, from headers and config),
:mod:`flexq_mxfp4.plan` (local read plans), :mod:`flexq_mxfp4.decode` (the
math) and :mod:`flexq_mxfp4.encode` (checkpoints for the demo).

The entry point imports only this module and :mod:`flexq_mxfp4.identity`: the parts are
``"module:attribute"`` references, imported when a checkpoint of the format is
composed (:class:`flexq.formatkit.Format`).
"""

from __future__ import annotations

from typing import Any

from flexq.formatkit.format import Format
from flexq_mxfp4.identity import CT_FORMAT, FORMAT_NAME

__all__ = ["plugin"]

plugin: Format[Any] = Format(
    FORMAT_NAME,
    "OCP MXFP4: gpt-oss `*_blocks`/`*_scales` and compressed-tensors `mxfp4-pack-quantized`.",
    methods=("mxfp4", f"compressed-tensors/{CT_FORMAT}"),
    analyze="flexq_mxfp4.detect:analyze",
    plan="flexq_mxfp4.plan:local_plan",
    decode="flexq_mxfp4.decode:decode",
    encode="flexq_mxfp4.encode:encode",
    api_version="1.2",
)
