"""llm-compressor (compressed-tensors checkpoints): one builder per scheme.

Every builder runs ``llmcompressor.oneshot`` on the tiny base model on CPU and
saves through its own ``save_pretrained`` (compressed safetensors + config.json);
the oracle is compressed-tensors' decompressor (:mod:`.compressed_tensors_ref`).

Not producible with llm-compressor 0.14 / compressed-tensors 0.19:
W4A16 act-order with ``weight_g_idx`` (``actorder="group"``): compressed-tensors
0.19 removed ``ActivationOrdering.GROUP`` ("actorder='group' has been removed");
the remaining ``actorder="weight"`` reorders columns during GPTQ only and writes
no g_idx, so :func:`gptq_actorder` covers GPTQ with act-order as
0.14 writes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import (
    LINEARS,
    Built,
    calibration_dataset,
    load_base,
    passthrough_of,
)
from .compressed_tensors_ref import ct_reference


def _oneshot(base: Path, out: Path, recipe: Any, calibrate: bool = False) -> Built:
    from llmcompressor import oneshot

    model = load_base(base)
    kwargs: dict[str, Any] = {}
    if calibrate:
        kwargs = {"dataset": calibration_dataset(), "num_calibration_samples": 4}
    oneshot(model=model, recipe=recipe, output_dir=str(out), **kwargs)
    return Built(out, ct_reference(out), passthrough_of(base, out, LINEARS))


def _preset(base: Path, out: Path, scheme: str, calibrate: bool = False) -> Built:
    from llmcompressor.modifiers.quantization import QuantizationModifier

    recipe = QuantizationModifier(targets="Linear", scheme=scheme, ignore=["lm_head"])
    return _oneshot(base, out, recipe, calibrate)


def _int_weights(bits: int, group_size: int, symmetric: bool = True) -> dict[str, Any]:
    return {
        "g": {
            "targets": ["Linear"],
            "weights": {
                "num_bits": bits,
                "type": "int",
                "symmetric": symmetric,
                "strategy": "group",
                "group_size": group_size,
            },
        }
    }


def fp8_tensor(base: Path, out: Path) -> Built:
    """``FP8``: per-tensor weight scale, static per-tensor input scale (calibrated)."""
    return _preset(base, out, "FP8", calibrate=True)


def fp8_channel(base: Path, out: Path) -> Built:
    """``FP8_DYNAMIC``: per-channel weight scale ``[out, 1]``."""
    return _preset(base, out, "FP8_DYNAMIC")


def fp8_block(base: Path, out: Path) -> Built:
    """``FP8_BLOCK``: 128x128 weight blocks, scale ``[ceil(out/128), ceil(in/128)]``."""
    return _preset(base, out, "FP8_BLOCK")


def mxfp8(base: Path, out: Path) -> Built:
    """``MXFP8A16``: ``mxfp8-quantized``, F8_E4M3 weight, E8M0 ``U8`` scale per 32."""
    return _preset(base, out, "MXFP8A16")


def mxfp4(base: Path, out: Path) -> Built:
    """``MXFP4A16``: ``mxfp4-pack-quantized``, E8M0 scale per 32."""
    return _preset(base, out, "MXFP4A16")


def nvfp4(base: Path, out: Path) -> Built:
    """``NVFP4A16``: ``nvfp4-pack-quantized``, FP8 scale per 16 and a global scale."""
    return _preset(base, out, "NVFP4A16")


def w4a16_sym(base: Path, out: Path) -> Built:
    """W4A16 symmetric, group 32 (``pack-quantized``, RTN)."""
    from llmcompressor.modifiers.quantization import QuantizationModifier

    recipe = QuantizationModifier(config_groups=_int_weights(4, 32), ignore=["lm_head"])
    return _oneshot(base, out, recipe)


def w4a16_asym(base: Path, out: Path) -> Built:
    """``W4A16_ASYM``: group 128 with packed ``weight_zero_point``."""
    return _preset(base, out, "W4A16_ASYM")


def gptq_actorder(base: Path, out: Path) -> Built:
    """GPTQ W4A16, group 64, ``actorder="weight"`` (calibrated; writes no g_idx)."""
    from llmcompressor.modifiers.gptq import GPTQModifier

    recipe = GPTQModifier(config_groups=_int_weights(4, 64), ignore=["lm_head"], actorder="weight")
    return _oneshot(base, out, recipe, calibrate=True)


def w8a16(base: Path, out: Path) -> Built:
    """``W8A16``: 8-bit ``pack-quantized`` (4 codes per int32 word)."""
    return _preset(base, out, "W8A16")


def w8a8(base: Path, out: Path) -> Built:
    """``W8A8``: ``int-quantized``, int8 weight with a per-channel scale."""
    return _preset(base, out, "W8A8")
