"""OCP MXFP4 (E2M1 elements, E8M0 scale per 32) as gpt-oss and compressed-tensors store it.

The ``mxfp4`` flexq format: :data:`flexq_mxfp4.plugin.plugin`, found through
the ``flexq`` entry point group; :func:`quantize` and :func:`save_mxfp4_checkpoint`
write MXFP4 tensors and checkpoints, :func:`dequantize` decodes rows of blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.formatkit.lazy import exports

if TYPE_CHECKING:
    from flexq_mxfp4.decode import dequantize
    from flexq_mxfp4.encode import quantize, quantize_array, save_mxfp4_checkpoint

__version__ = "0.1.0"

__all__ = ["__version__", "dequantize", "quantize", "quantize_array", "save_mxfp4_checkpoint"]

# Imported on first use: discovery imports this package for its entry point
# (flexq_mxfp4.plugin), and a load that never encodes need not import the encoder.
__getattr__ = exports(
    __name__,
    {
        "dequantize": "flexq_mxfp4.decode",
        "quantize": "flexq_mxfp4.encode",
        "quantize_array": "flexq_mxfp4.encode",
        "save_mxfp4_checkpoint": "flexq_mxfp4.encode",
    },
)
