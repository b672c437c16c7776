"""NVFP4 (E2M1 elements, E4M3 scale per 16, float32 global scale) for flexq.

The ``nvfp4`` flexq format: compressed-tensors ``nvfp4-pack-quantized``
(llm-compressor, auto-round) and NVIDIA ModelOpt ``NVFP4`` checkpoints. The hooks
are the :class:`flexq.formatkit.Format` ``flexq_nvfp4.plugin:plugin``, found through
the ``flexq`` entry point group; :func:`quantize` writes NVFP4 tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.formatkit.lazy import exports

if TYPE_CHECKING:
    from flexq_nvfp4.decode import dequantize, effective_scales
    from flexq_nvfp4.encode import quantize, quantize_array

__version__ = "0.1.0"

__all__ = ["__version__", "dequantize", "effective_scales", "quantize", "quantize_array"]

# Imported on first use: discovery imports this package for its entry point
# (flexq_nvfp4.plugin), and a load that never encodes need not import the encoder.
__getattr__ = exports(
    __name__,
    {
        "dequantize": "flexq_nvfp4.decode",
        "effective_scales": "flexq_nvfp4.decode",
        "quantize": "flexq_nvfp4.encode",
        "quantize_array": "flexq_nvfp4.encode",
    },
)
