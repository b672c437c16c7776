"""The format's identity: its name and the config methods it claims.

Cheap constants, no imports of the modules that do the work: the entry point
(:mod:`flexq_fp8.plugin`) reads them at discovery in every process that uses flexq.
"""

from __future__ import annotations

FORMAT_NAME = "fp8"
#: compressed-tensors formats of FP8 E4M3 weights: ``float-quantized`` (float scales)
#: and ``mxfp8-quantized`` (llm-compressor's MXFP8A16: E8M0 ``U8`` scales per 32).
CT_FORMATS = ("float-quantized", "mxfp8-quantized")
