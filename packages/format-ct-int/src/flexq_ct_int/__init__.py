"""compressed-tensors integer weights (pack-quantized W4A16/W8A16, int-quantized W8A8) for flexq.

Installing this package registers the ``ct-int`` format through the ``flexq``
entry-point group (the :class:`flexq.formatkit.Format` ``flexq_ct_int.plugin:plugin``).
For producing test checkpoints it exports :func:`quantize` (one weight -> its compressed-tensors
tensors), :func:`quantization_config` and :func:`save_ct_int_checkpoint`, all of one
:class:`WeightScheme`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.formatkit.lazy import exports

if TYPE_CHECKING:
    from flexq_ct_int.encode import (
        WeightScheme,
        quantization_config,
        quantize,
        save_ct_int_checkpoint,
    )
    from flexq_ct_int.packing import Packing, pack_cols, pack_rows

__version__ = "0.1.0"

__all__ = [
    "Packing",
    "WeightScheme",
    "__version__",
    "pack_cols",
    "pack_rows",
    "quantization_config",
    "quantize",
    "save_ct_int_checkpoint",
]

# Imported on first use: discovery imports this package for its entry point
# (flexq_ct_int.plugin), and a load that never encodes need not import the encoder.
__getattr__ = exports(
    __name__,
    {
        "Packing": "flexq_ct_int.packing",
        "WeightScheme": "flexq_ct_int.encode",
        "pack_cols": "flexq_ct_int.packing",
        "pack_rows": "flexq_ct_int.packing",
        "quantization_config": "flexq_ct_int.encode",
        "quantize": "flexq_ct_int.encode",
        "save_ct_int_checkpoint": "flexq_ct_int.encode",
    },
)
