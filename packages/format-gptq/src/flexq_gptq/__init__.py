"""GPTQ format for flexq: qweight, qzeros, scales and g_idx -> X.weight [out, in].

Installed as the ``gptq`` format (entry point in the group ``flexq``); decodes
``quant_method: "gptq"`` (AutoGPTQ, GPTQModel, optimum) and ``"auto-round"``
checkpoints with 2, 3, 4 or 8 bits. :func:`quantize` writes the same tensors
from float32 weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.formatkit.lazy import exports

if TYPE_CHECKING:
    from flexq_gptq.encode import quantization_config, quantize
    from flexq_gptq.packing import Packing, pack_codes

__version__ = "0.1.0"

__all__ = ["Packing", "__version__", "pack_codes", "quantization_config", "quantize"]

# Imported on first use: discovery imports this package for its entry point
# (flexq_gptq.plugin), and a load that never encodes need not import the encoder.
__getattr__ = exports(
    __name__,
    {
        "Packing": "flexq_gptq.packing",
        "pack_codes": "flexq_gptq.packing",
        "quantization_config": "flexq_gptq.encode",
        "quantize": "flexq_gptq.encode",
    },
)
