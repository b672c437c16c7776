"""OCP MXFP4 (E2M1 elements, E8M0 scale per 32) as gpt-oss and compressed-tensors store it.

The ``mxfp4`` flexq format: the hooks in :mod:`flexq_mxfp4.plugin`, found through
the ``flexq`` entry point group; :func:`quantize` and :func:`save_mxfp4_checkpoint`
write MXFP4 tensors and checkpoints, :func:`dequantize` decodes rows of blocks.
"""

from __future__ import annotations

from flexq_mxfp4.decode import dequantize
from flexq_mxfp4.encode import quantize, quantize_array, save_mxfp4_checkpoint

__version__ = "0.1.0"

__all__ = ["__version__", "dequantize", "quantize", "quantize_array", "save_mxfp4_checkpoint"]
