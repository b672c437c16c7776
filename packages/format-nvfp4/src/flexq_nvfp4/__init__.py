"""NVFP4 (E2M1 elements, E4M3 scale per 16, float32 global scale) for flexq.

The ``nvfp4`` flexq format: compressed-tensors ``nvfp4-pack-quantized``
(llm-compressor, auto-round) and NVIDIA ModelOpt ``NVFP4`` checkpoints. The hooks
are the :class:`flexq.formatkit.Format` ``flexq_nvfp4.plugin:plugin``, found through
the ``flexq`` entry point group; :func:`quantize` writes NVFP4 tensors.
"""

from __future__ import annotations

from flexq_nvfp4.decode import dequantize, effective_scales
from flexq_nvfp4.encode import quantize, quantize_array

__version__ = "0.1.0"

__all__ = ["__version__", "dequantize", "effective_scales", "quantize", "quantize_array"]
