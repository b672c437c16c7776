"""FP8 E4M3 weights (per-tensor, per-channel, block-wise, compressed-tensors) for flexq.

Installing this package registers the ``fp8`` format through the ``flexq``
entry-point group (:mod:`flexq_fp8.plugin`). For producing FP8 checkpoints it
exports :func:`quantize` (one weight -> F8_E4M3 codes + scale),
:func:`encode_e4m3` (the element encoder) and :func:`save_fp8_checkpoint` (a
whole checkpoint with its config.json), all from :mod:`flexq_fp8.encode`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.formatkit.lazy import exports

if TYPE_CHECKING:
    from flexq_fp8.encode import encode_e4m3, quantize, save_fp8_checkpoint

__version__ = "0.1.0"

__all__ = ["encode_e4m3", "quantize", "save_fp8_checkpoint"]

# Imported on first use: discovery imports this package for its entry point
# (flexq_fp8.plugin), and a load that never encodes need not import the encoder.
__getattr__ = exports(
    __name__,
    {
        "encode_e4m3": "flexq_fp8.encode",
        "quantize": "flexq_fp8.encode",
        "save_fp8_checkpoint": "flexq_fp8.encode",
    },
)
