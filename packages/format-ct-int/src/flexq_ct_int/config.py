"""The compressed-tensors integer formats this package decodes, and reading their config.

For :mod:`flexq_ct_int.detect`. The config itself (declared formats, ``config_groups``,
each module's scheme from its group's targets, ``ignore``) is the kit's one model of
compressed-tensors configs (:class:`flexq.formatkit.CtConfig`), the same one every
other format and the core's detection read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from flexq.formatkit import read_compressed_tensors

if TYPE_CHECKING:
    from flexq import Checkpoint
    from flexq.formatkit import CtConfig

FORMAT_NAME = "ct-int"
QUANT_METHOD = "compressed-tensors"
PACK: Literal["pack-quantized"] = "pack-quantized"
INT: Literal["int-quantized"] = "int-quantized"
#: The compressed-tensors formats this package decodes.
FORMATS = (PACK, INT)


def read_config(ckpt: Checkpoint) -> CtConfig | None:
    """The compressed-tensors config of ``ckpt``; None when its quant_method is another.

    :raises FormatError: when a compressed-tensors config is malformed (naming the field).
    """
    return read_compressed_tensors(ckpt, FORMAT_NAME)
