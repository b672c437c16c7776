"""FP8 E4M3 weights (per-tensor, per-channel, block-wise, compressed-tensors) for flexq.

Installing this package registers the ``fp8`` format through the ``flexq``
entry-point group (:mod:`flexq_fp8.plugin`). For producing FP8 checkpoints it
exports :func:`quantize` (one weight -> F8_E4M3 codes + scale) and
:func:`save_fp8_checkpoint` (a whole checkpoint with its config.json).
"""

from __future__ import annotations

from flexq_fp8.dequant import E4M3_TO_FLOAT32, E8M0_TO_FLOAT32
from flexq_fp8.encode import encode_e4m3, quantize
from flexq_fp8.save import save_fp8_checkpoint

__version__ = "0.1.0"

__all__ = [
    "E4M3_TO_FLOAT32",
    "E8M0_TO_FLOAT32",
    "encode_e4m3",
    "quantize",
    "save_fp8_checkpoint",
]
