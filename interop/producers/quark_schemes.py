"""AMD Quark 0.13: ``ModelQuantizer`` + ``export_safetensors`` (quark mode, ``pack_method:
reorder``) on CPU, weight-only schemes over every Linear but ``lm_head``.

Quark JIT-builds its C++ kernels with g++ and ninja on its first import in a fresh
environment (measured here: ~4.7 minutes on the first import, ~1.6 minutes on later
imports, which still load and check the extension), so every scheme imports it once.

Oracle: Quark's own importer and dequantizer over the exported files:
``import_model_from_safetensors`` rebuilds each Linear as a ``QParamsLinear`` from the
safetensors tensors, and its ``weight_quantizer`` (``StaticScaledRealQuantizer``:
``pack_method.unpack`` then ``quark.torch.kernel.dequantize``) turns the stored codes
back into the float32 weight the model computes with (``QParamsLinear._get_qweight``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .base import LINEARS, Built, f32, load_base, passthrough_of


def _export(base: Path, out: Path, weight: Any) -> Built:
    from quark.torch import ModelQuantizer, export_safetensors, import_model_from_safetensors
    from quark.torch.quantization.config.config import QConfig, QLayerConfig

    model = load_base(base)
    config = QConfig(
        global_quant_config=QLayerConfig(weight=weight.to_quantization_spec()), exclude=["lm_head"]
    )
    quantizer = ModelQuantizer(config)
    model = quantizer.quantize_model(model, None)  # weight-only: no calibration data
    model = quantizer.freeze(model)
    export_safetensors(model, out, custom_mode="quark", pack_method="reorder")
    reloaded = import_model_from_safetensors(load_base(base), str(out))
    modules = dict(reloaded.named_modules())
    reference = {}
    with torch.no_grad():
        for prefix in LINEARS:
            module = modules[prefix]
            reference[f"{prefix}.weight"] = f32(module.weight_quantizer(module.weight.data))
    return Built(out, reference, passthrough_of(base, out, LINEARS))


def fp8_tensor(base: Path, out: Path) -> Built:
    """FP8 E4M3, one BF16 0-d scale per tensor (min-max)."""
    from quark.torch.quantization.config.config import FP8E4M3PerTensorSpec

    return _export(base, out, FP8E4M3PerTensorSpec(observer_method="min_max", is_dynamic=False))


def fp8_channel(base: Path, out: Path) -> Built:
    """FP8 E4M3 per output channel (PTPC weights), BF16 scales [out]."""
    from quark.torch.quantization.config.config import FP8E4M3PerChannelSpec

    return _export(base, out, FP8E4M3PerChannelSpec(ch_axis=0, is_dynamic=False))


def int4_g128(base: Path, out: Path) -> Built:
    """Signed int4, symmetric, groups of 128 along in (zeros stored, all 0)."""
    from quark.torch.quantization.config.config import Int4PerGroupSpec

    return _export(base, out, Int4PerGroupSpec(ch_axis=1, group_size=128, is_dynamic=False))


def uint4_g128(base: Path, out: Path) -> Built:
    """Unsigned int4, asymmetric, groups of 128 along in (zero points 0..15)."""
    from quark.torch.quantization.config.config import Uint4PerGroupSpec

    return _export(base, out, Uint4PerGroupSpec(ch_axis=1, group_size=128, is_dynamic=False))


def mxfp4(base: Path, out: Path) -> Built:
    """OCP MXFP4: E2M1 codes, one E8M0 scale per 32 along in."""
    from quark.torch.quantization.config.config import OCP_MXFP4Spec

    return _export(base, out, OCP_MXFP4Spec(ch_axis=-1, is_dynamic=False))
