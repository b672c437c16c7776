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

from flexq.formatkit import IgnoreList, QuantConfig, parse_quant_config
from flexq_mxfp4.identity import CT_FORMAT as CT_FORMAT
from flexq_mxfp4.identity import FORMAT_NAME as FORMAT_NAME

if TYPE_CHECKING:
    from flexq import Checkpoint


class CtGroup(QuantConfig):
    """One compressed-tensors ``config_groups`` entry (only its format is read here)."""

    format: str | None = None


class MxQuantConfig(QuantConfig):
    """The ``quantization_config`` fields this format reads; others are kept, unread."""

    quant_method: str | None = None
    format: str | None = None
    config_groups: dict[str, CtGroup] | None = None


@dataclass(frozen=True)
class MxConfig:
    """The MXFP4-relevant part of a checkpoint's config.

    :ivar ct_formats: formats a compressed-tensors config declares (empty for any
        other config; ``mixed-precision`` dropped, it only says the groups carry them).
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
    if qc.get("quant_method") != "compressed-tensors":
        return MxConfig(frozenset(), ignored)
    model = parse_quant_config(MxQuantConfig, ckpt, FORMAT_NAME)
    named = [model.format, *(g.format for g in (model.config_groups or {}).values())]
    return MxConfig(frozenset(f for f in named if f and f != "mixed-precision"), ignored)
