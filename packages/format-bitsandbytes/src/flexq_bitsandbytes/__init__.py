"""bitsandbytes NF4/FP4 (double quantization included) and LLM.int8 weights for flexq.

The ``bitsandbytes`` flexq format: the :class:`flexq.formatkit.Format`
``flexq_bitsandbytes.plugin:plugin``, found through the ``flexq`` entry point
group, and :func:`quantize` to write
the tensors bitsandbytes and transformers' ``save_pretrained`` write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.formatkit.lazy import exports

if TYPE_CHECKING:
    from flexq_bitsandbytes.encode import quantization_config, quantize

__version__ = "0.1.0"

__all__ = ["__version__", "quantization_config", "quantize"]

# Imported on first use: discovery imports this package for its entry point
# (flexq_bitsandbytes.plugin), and a load that never encodes need not import the encoder.
__getattr__ = exports(
    __name__,
    {
        "quantization_config": "flexq_bitsandbytes.encode",
        "quantize": "flexq_bitsandbytes.encode",
    },
)
