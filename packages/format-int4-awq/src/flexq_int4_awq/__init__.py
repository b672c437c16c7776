"""AutoAWQ INT4 format for flexq: GEMM/GEMV qweight, qzeros, scales -> X.weight [out, in].

Installed as the ``int4-awq`` format (entry point in the group ``flexq``).
:func:`quantize` writes the same tensors from float32 weights,
:func:`save_awq_checkpoint` a whole checkpoint (both in :mod:`flexq_int4_awq.encode`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.formatkit.lazy import exports

if TYPE_CHECKING:
    from flexq_int4_awq.encode import pack_int4, quantization_config, quantize, save_awq_checkpoint
    from flexq_int4_awq.layout import AWQ_ORDER

__version__ = "0.1.0"

__all__ = [
    "AWQ_ORDER",
    "__version__",
    "pack_int4",
    "quantization_config",
    "quantize",
    "save_awq_checkpoint",
]

# Imported on first use: discovery imports this package for its entry point
# (flexq_int4_awq.plugin), and a load that never encodes need not import the encoder.
__getattr__ = exports(
    __name__,
    {
        "AWQ_ORDER": "flexq_int4_awq.layout",
        "pack_int4": "flexq_int4_awq.encode",
        "quantization_config": "flexq_int4_awq.encode",
        "quantize": "flexq_int4_awq.encode",
        "save_awq_checkpoint": "flexq_int4_awq.encode",
    },
)
