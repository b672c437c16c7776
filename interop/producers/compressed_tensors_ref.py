"""compressed-tensors' own decompressors as the float32 oracle.

Every quantized module's tensors go through the compressor class registered for
the checkpoint's ``format`` (``BaseCompressor.get_value_from_registry(format)``
then ``.decompress(state_dict, scheme)``), the same code vLLM-free readers and
``ModelCompressor.decompress_model`` run. compressed-tensors dequantizes in the
scale's dtype, so bfloat16 / float16 scales are widened to float32 first
(exactly); the decompressor's own math then runs in float32, which is what
flexq promises to match bit for bit. NVFP4's decompressor unpacks to bfloat16
by default and rounds its result there, so its float32 twin calls the same
helpers (``unpack_fp4_from_uint8`` and ``dequantize``) with ``dtype=float32``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .base import LINEARS, f32, quantization_config, read_safetensors

WIDEN = (torch.bfloat16, torch.float16)


def ct_reference(directory: Path) -> dict[str, np.ndarray]:
    """Logical ``X.weight`` -> compressed-tensors' float32 dequantization, per quantized Linear."""
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig

    qc = quantization_config(directory)
    config = QuantizationConfig.model_validate(qc)
    groups = list(config.config_groups.values())
    assert len(groups) == 1, f"{directory}: one config group expected, got {len(groups)}"
    scheme = groups[0]
    fmt = getattr(scheme, "format", None) or config.format
    compressor = BaseCompressor.get_value_from_registry(fmt)
    tensors = read_safetensors(directory)
    out = {}
    for prefix in LINEARS:
        local = {k[len(prefix) + 1 :]: v for k, v in tensors.items() if k.startswith(prefix + ".")}
        if "weight_scale" not in local:
            continue
        local = {k: v.to(torch.float32) if v.dtype in WIDEN else v for k, v in local.items()}
        if fmt == "nvfp4-pack-quantized":
            weight = _nvfp4_float32(local, scheme)
        else:
            weight = compressor.decompress(local, scheme)["weight"]
        out[f"{prefix}.weight"] = f32(weight)
    return out


def _nvfp4_float32(local: dict[str, torch.Tensor], scheme: object) -> torch.Tensor:
    """NVFP4PackedCompressor.decompress with float32 as the dense dtype."""
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    packed = local["weight_packed"]
    rows, half = packed.shape
    unpacked = unpack_fp4_from_uint8(packed, rows, half * 2, dtype=torch.float32)
    weights = scheme.weights  # type: ignore[attr-defined]
    result: torch.Tensor = dequantize(
        x_q=unpacked,
        scale=local["weight_scale"].to(torch.float32),
        args=weights,
        global_scale=local["weight_global_scale"],
        dtype=torch.float32,
    )
    return result
