"""The compressed-tensors integer formats this package decodes, and reading their config.

For :mod:`flexq_ct_int.detect`. The config itself (declared formats, ``config_groups``,
each module's scheme from its group's targets, ``ignore``) is the kit's one model of
compressed-tensors configs (:class:`flexq.formatkit.CtConfig`), the same one every
other format and the core's detection read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.formatkit import read_compressed_tensors
from flexq_ct_int.identity import FORMAT_NAME as FORMAT_NAME
from flexq_ct_int.identity import FORMATS as FORMATS
from flexq_ct_int.identity import INT as INT
from flexq_ct_int.identity import PACK as PACK
from flexq_ct_int.identity import QUANT_METHOD as QUANT_METHOD

if TYPE_CHECKING:
    from flexq import Checkpoint
    from flexq.formatkit import CtConfig


def read_config(ckpt: Checkpoint) -> CtConfig | None:
    """The compressed-tensors config of ``ckpt``; None when its quant_method is another.

    :raises FormatError: when a compressed-tensors config is malformed (naming the field).
    """
    return read_compressed_tensors(ckpt, FORMAT_NAME)
