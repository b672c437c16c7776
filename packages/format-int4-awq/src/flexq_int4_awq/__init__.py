"""AutoAWQ INT4 format for flexq: GEMM/GEMV qweight, qzeros, scales -> X.weight [out, in].

Installed as the ``int4-awq`` format (entry point in the group ``flexq``).
:func:`quantize` writes the same tensors from float32 weights.
"""

from __future__ import annotations

from flexq_int4_awq.encoder import quantization_config, quantize
from flexq_int4_awq.packing import AWQ_ORDER, pack_int4

__version__ = "0.1.0"

__all__ = ["AWQ_ORDER", "__version__", "pack_int4", "quantization_config", "quantize"]
