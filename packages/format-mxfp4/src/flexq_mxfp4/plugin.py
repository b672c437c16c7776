"""OCP MXFP4: gpt-oss `*_blocks`/`*_scales` and compressed-tensors `mxfp4-pack-quantized`.

The ``mxfp4`` format as one :class:`flexq.formatkit.Format` (the entry point
``flexq_mxfp4.plugin:plugin`` names it), over the modules that do the work:
:mod:`flexq_mxfp4.detect` (which tensors, from headers and config),
:mod:`flexq_mxfp4.plan` (local read plans), :mod:`flexq_mxfp4.decode` (the
math) and :mod:`flexq_mxfp4.encode` (checkpoints for the demo).
"""

from __future__ import annotations

from flexq.formatkit import Format
from flexq_mxfp4.config import CT_FORMAT, FORMAT_NAME
from flexq_mxfp4.decode import apply
from flexq_mxfp4.detect import analyze
from flexq_mxfp4.encode import encode
from flexq_mxfp4.plan import local_plan

__all__ = ["plugin"]

plugin = Format(
    FORMAT_NAME,
    "OCP MXFP4: gpt-oss `*_blocks`/`*_scales` and compressed-tensors `mxfp4-pack-quantized`.",
    methods=("mxfp4", f"compressed-tensors/{CT_FORMAT}"),
    analyze=analyze,
    plan=local_plan,
    decode=apply,
    encode=encode,
    api_version="1.0",
)
