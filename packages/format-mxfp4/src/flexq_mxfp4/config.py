"""What config.json's ``quantization_config`` says about MXFP4 tensors.

Read by :mod:`flexq_mxfp4.detect`: the compressed-tensors formats a config
declares (``weight_packed`` / ``weight_scale`` pairs are MXFP4 only under
``mxfp4-pack-quantized`` or no declaration at all; NVFP4 and INT4 share those
names) and the modules its ignore lists leave unquantized
(:class:`flexq.formatkit.IgnoreList`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flexq.formatkit import IgnoreList, read_compressed_tensors
from flexq_mxfp4.identity import CT_FORMAT as CT_FORMAT
from flexq_mxfp4.identity import FORMAT_NAME as FORMAT_NAME

if TYPE_CHECKING:
    from flexq import Checkpoint


@dataclass(frozen=True)
class MxConfig:
    """The MXFP4-relevant part of a checkpoint's config.

    :ivar ct_formats: formats a compressed-tensors config declares (the kit's
        :attr:`CtConfig.declared_formats <flexq.formatkit.CtConfig.declared_formats>`;
        empty for any other config).
    :ivar ignored: the modules the config leaves unquantized.
    """

    ct_formats: frozenset[str]
    ignored: IgnoreList


def read_config(ckpt: Checkpoint) -> MxConfig:
    """Interpret ``ckpt.quantization_config``.

    :raises FormatError: on a malformed compressed-tensors config or ignore list.
    """
    qc = ckpt.quantization_config
    ignored = IgnoreList.from_config(
        qc, f"{ckpt.path / 'config.json'} (format {FORMAT_NAME!r}): quantization_config"
    )
    ct = read_compressed_tensors(ckpt, FORMAT_NAME)
    return MxConfig(frozenset() if ct is None else ct.declared_formats, ignored)
