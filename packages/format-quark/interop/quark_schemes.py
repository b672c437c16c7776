"""flexq-format-quark's interop rows (collected by interop/schemes.py from
``packages/*/interop/*_schemes.py``; the producer pin is this package's
``[tool.flexq.interop]`` in its pyproject, collected by noxfile.py).

AMD Quark 0.13: ``ModelQuantizer`` + ``export_safetensors`` (quark mode, ``pack_method:
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

import importlib
from pathlib import Path
from typing import Any

import torch

from interop.producers.base import LINEARS, Built, f32, load_base, passthrough_of
from interop.scheme import Scheme


def _quark(module: str = "quark.torch") -> Any:
    """A Quark module, imported when a scheme is built (Quark ships no type hints: by
    name, so the type checker needs no configuration for it outside this package)."""
    return importlib.import_module(module)


def _config() -> Any:
    return _quark("quark.torch.quantization.config.config")


def _export(base: Path, out: Path, weight: Any) -> Built:
    qtorch, config_types = _quark(), _config()
    model = load_base(base)
    config = config_types.QConfig(
        global_quant_config=config_types.QLayerConfig(weight=weight.to_quantization_spec()),
        exclude=["lm_head"],
    )
    quantizer = qtorch.ModelQuantizer(config)
    model = quantizer.quantize_model(model, None)  # weight-only: no calibration data
    model = quantizer.freeze(model)
    qtorch.export_safetensors(model, out, custom_mode="quark", pack_method="reorder")
    reloaded = qtorch.import_model_from_safetensors(load_base(base), str(out))
    modules = dict(reloaded.named_modules())
    reference = {}
    with torch.no_grad():
        for prefix in LINEARS:
            module = modules[prefix]
            reference[f"{prefix}.weight"] = f32(module.weight_quantizer(module.weight.data))
    return Built(out, reference, passthrough_of(base, out, LINEARS))


def fp8_tensor(base: Path, out: Path) -> Built:
    """FP8 E4M3, one BF16 0-d scale per tensor (min-max)."""
    return _export(
        base, out, _config().FP8E4M3PerTensorSpec(observer_method="min_max", is_dynamic=False)
    )


def fp8_channel(base: Path, out: Path) -> Built:
    """FP8 E4M3 per output channel (PTPC weights), BF16 scales [out]."""
    spec = _config().FP8E4M3PerChannelSpec(ch_axis=0, is_dynamic=False)
    return _export(base, out, spec)


def int4_g128(base: Path, out: Path) -> Built:
    """Signed int4, symmetric, groups of 128 along in (zeros stored, all 0)."""
    return _export(
        base, out, _config().Int4PerGroupSpec(ch_axis=1, group_size=128, is_dynamic=False)
    )


def uint4_g128(base: Path, out: Path) -> Built:
    """Unsigned int4, asymmetric, groups of 128 along in (zero points 0..15)."""
    return _export(
        base, out, _config().Uint4PerGroupSpec(ch_axis=1, group_size=128, is_dynamic=False)
    )


def mxfp4(base: Path, out: Path) -> Built:
    """OCP MXFP4: E2M1 codes, one E8M0 scale per 32 along in."""
    spec = _config().OCP_MXFP4Spec(ch_axis=-1, is_dynamic=False)
    return _export(base, out, spec)


#: This package's rows of the interop expectation table (interop/schemes.py).
SCHEMES = (
    Scheme("quark-fp8-tensor", fp8_tensor, "quark", "quark", 0.05),
    Scheme("quark-fp8-channel", fp8_channel, "quark", "quark", 0.05),
    Scheme("quark-int4-g128", int4_g128, "quark", "quark", 0.2),
    Scheme("quark-uint4-g128", uint4_g128, "quark", "quark", 0.15),
    Scheme("quark-mxfp4", mxfp4, "quark", "quark", 0.15),
)
