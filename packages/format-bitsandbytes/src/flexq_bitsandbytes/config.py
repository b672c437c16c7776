"""The ``quantization_config`` transformers writes for bitsandbytes (``BitsAndBytesConfig``).

For the detector: whether the checkpoint declares bitsandbytes, which kind
(4-bit or LLM.int8), its storage type and the modules it left unquantized.
Only the fields flexq acts on are modelled; transformers writes more
(``bnb_4bit_compute_dtype``, ``llm_int8_threshold``, ...), which are
accepted and ignored: the compute dtype is what bnb multiplies activations in,
not the dtype the weights were stored from (that is the quant state's ``dtype``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from flexq import Checkpoint, FormatError

FORMAT = "bitsandbytes"


class BnbConfig(BaseModel):
    """``quantization_config`` of a bitsandbytes checkpoint."""

    model_config = ConfigDict(extra="allow", frozen=True)

    quant_method: str = FORMAT
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    bnb_4bit_quant_type: str = "fp4"
    bnb_4bit_use_double_quant: bool = False
    bnb_4bit_quant_storage: str = "uint8"
    llm_int8_skip_modules: list[str] | None = None
    modules_to_not_convert: list[str] | None = None

    @property
    def skipped(self) -> list[str]:
        """Module patterns the producer left unquantized."""
        return [*(self.llm_int8_skip_modules or ()), *(self.modules_to_not_convert or ())]


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
    qc = ckpt.quantization_config
    if not declared(qc):
        return None
    try:
        return BnbConfig.model_validate(qc)
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = ".".join(str(p) for p in problem["loc"])
        raise FormatError(
            f"{ckpt.path / 'config.json'}: quantization_config.{field}: {problem['msg']} "
            f"(format {FORMAT!r})"
        ) from None
