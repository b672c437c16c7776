"""The format's identity: its name and the config methods it claims.

Cheap constants, no imports of the modules that do the work: the entry point
(:mod:`flexq_ct_int.plugin`) reads them at discovery in every process that uses flexq.
"""

from __future__ import annotations

from typing import Literal

FORMAT_NAME = "ct-int"
QUANT_METHOD = "compressed-tensors"
PACK: Literal["pack-quantized"] = "pack-quantized"
INT: Literal["int-quantized"] = "int-quantized"
#: The compressed-tensors formats this package decodes.
FORMATS = (PACK, INT)
