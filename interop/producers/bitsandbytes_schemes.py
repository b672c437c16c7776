"""bitsandbytes 0.50.2 through transformers' ``BitsAndBytesConfig`` on CPU.

transformers quantizes while loading the base model (``device_map="cpu"``) and
``save_pretrained`` writes the serialized quant states. Oracles are
bitsandbytes' own: ``QuantState.from_dict`` over the saved components, then
``bnb.functional.dequantize_4bit`` with the state's dtype set to float32 (it
otherwise rounds to the compute dtype); for LLM.int8,
``bnb.functional.int8_vectorwise_dequant(CB, SCB)``, which is what transformers'
``dequantize_bnb_weight`` calls. It computes ``CB * SCB * 7.874015718698502e-3``
(the float32 reciprocal of 127), not ``CB * SCB / 127``: the two differ in the
last bit for some elements, and the producer's own is the oracle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from .base import LINEARS, Built, f32, passthrough_of, read_safetensors


def _quantize(base: Path, out: Path, config: Any) -> Path:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, quantization_config=config, device_map="cpu")
    model.save_pretrained(out)
    return out


def _four_bit(base: Path, out: Path, quant_type: str, double_quant: bool) -> Built:
    import bitsandbytes as bnb
    from bitsandbytes.functional import QuantState
    from transformers import BitsAndBytesConfig

    config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=quant_type,
        bnb_4bit_use_double_quant=double_quant,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    path = _quantize(base, out, config)
    tensors = read_safetensors(path)
    reference = {}
    for prefix in LINEARS:
        head = f"{prefix}.weight."
        components = {k[len(head) :]: v for k, v in tensors.items() if k.startswith(head)}
        state = QuantState.from_dict(components, device=torch.device("cpu"))
        state.dtype = torch.float32
        weight = bnb.functional.dequantize_4bit(tensors[f"{prefix}.weight"], state)
        reference[f"{prefix}.weight"] = f32(weight)
    return Built(path, reference, passthrough_of(base, path, LINEARS))


def nf4(base: Path, out: Path) -> Built:
    """NF4 with double quantization (the "-bnb-4bit" default)."""
    return _four_bit(base, out, "nf4", True)


def fp4(base: Path, out: Path) -> Built:
    """FP4, plain float32 absmax per 64."""
    return _four_bit(base, out, "fp4", False)


def int8(base: Path, out: Path) -> Built:
    """LLM.int8 (``load_in_8bit``): int8 ``weight`` and per-row ``SCB``."""
    import bitsandbytes as bnb
    from transformers import BitsAndBytesConfig

    path = _quantize(base, out, BitsAndBytesConfig(load_in_8bit=True))
    tensors = read_safetensors(path)
    reference: dict[str, np.ndarray] = {}
    for prefix in LINEARS:
        weight = bnb.functional.int8_vectorwise_dequant(
            tensors[f"{prefix}.weight"], tensors[f"{prefix}.SCB"]
        )
        reference[f"{prefix}.weight"] = f32(weight)
    return Built(path, reference, passthrough_of(base, path, LINEARS))
