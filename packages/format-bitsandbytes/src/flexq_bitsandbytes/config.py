"""The ``quantization_config`` transformers writes for bitsandbytes (``BitsAndBytesConfig``).

For the detector: whether the checkpoint declares bitsandbytes and which kind
(4-bit or LLM.int8). Only the fields flexq acts on are modelled; transformers
writes more (``bnb_4bit_compute_dtype``, ``llm_int8_threshold``, ...), which are
kept and ignored: the compute dtype is what bnb multiplies activations in, not
the dtype the weights were stored from (that is the quant state's ``dtype``).
The ignore lists (``llm_int8_skip_modules``, ``modules_to_not_convert``) are read
by :class:`flexq.formatkit.IgnoreList`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flexq.formatkit import QuantConfig, parse_quant_config
from flexq_bitsandbytes.identity import FORMAT as FORMAT

if TYPE_CHECKING:
    from flexq import Checkpoint

#: Config fields naming the modules bitsandbytes left unquantized.
SKIP_FIELDS = ("llm_int8_skip_modules", "modules_to_not_convert")


class BnbConfig(QuantConfig):
    """``quantization_config`` of a bitsandbytes checkpoint."""

    quant_method: str = FORMAT
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    bnb_4bit_quant_type: str = "fp4"
    bnb_4bit_use_double_quant: bool = False
    bnb_4bit_quant_storage: str = "uint8"


def declared(qc: dict[str, Any]) -> bool:
    """Whether ``qc`` declares bitsandbytes (older configs carry only ``load_in_*bit``)."""
    method = qc.get("quant_method")
    if method is not None:
        return bool(method == FORMAT)
    return qc.get("load_in_4bit") is True or qc.get("load_in_8bit") is True


def parse(ckpt: Checkpoint) -> BnbConfig | None:
    """The checkpoint's bitsandbytes config, or None when it declares another method or none.

    :raises FormatError: when a bitsandbytes config has fields of the wrong type.
    """
    if not declared(ckpt.quantization_config):
        return None
    return parse_quant_config(BnbConfig, ckpt, FORMAT)
