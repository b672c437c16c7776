"""NVIDIA ModelOpt 0.47 on CPU: ``mtq.quantize`` with a preset, then its HF export.

``modelopt.torch.quantization.quantize(model, CFG, forward_loop)`` calibrates on
CPU (the ``max`` algorithm runs the forward loop in plain torch); then
``modelopt.torch.export.export_hf_checkpoint`` writes safetensors, ``config.json``
(``quantization_config: {quant_method: modelopt, quant_algo}``) and
``hf_quant_config.json``. The export needs ``config.architectures``, which the
base model has from ``save_pretrained``.

Oracles are ModelOpt's own ``QTensor`` dequantizers, run in float32:

- ``FP8_DEFAULT_CFG`` (``quant_algo: FP8``): ``FP8QTensor.dequantize`` with the 0-d
  ``weight_scale``;
- ``FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG`` (``quant_algo: fp8_pb_wo``):
  ``FP8QTensor.dequantize`` with the ``[g0, 1, g1, 1]`` ``weight_scale`` (0-d for a
  weight of one block) reshaped to the grid and the preset's 128x128 ``block_sizes``
  (the block size is in neither config: the oracle knows it from the preset, flexq
  infers it from the shapes);
- ``NVFP4_DEFAULT_CFG`` (``quant_algo: NVFP4``): ``NVFP4QTensor.dequantize`` (its
  non-kernel path: ``e2m1 * (scale * scale_2)``) with ``dtype=float32``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from .base import (
    LINEARS,
    Built,
    calibration_dataset,
    f32,
    load_base,
    passthrough_of,
    read_safetensors,
)

#: ``FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG``'s block edge (its ``block_sizes`` -1 and -2).
PRESET_BLOCK = 128


def _export(base: Path, out: Path, preset: str) -> dict[str, torch.Tensor]:
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint

    model = load_base(base)
    ids = torch.tensor(calibration_dataset()["input_ids"])

    def forward_loop(m: Any) -> None:
        with torch.no_grad():
            m(ids)

    mtq.quantize(model, getattr(mtq, preset), forward_loop)
    export_hf_checkpoint(model, export_dir=out)
    return read_safetensors(out)


def fp8_tensor(base: Path, out: Path) -> Built:
    """``FP8_DEFAULT_CFG``: FP8 weight, 0-d F32 ``weight_scale`` (and an input scale)."""
    from modelopt.torch.quantization.qtensor.fp8_tensor import FP8QTensor

    tensors = _export(base, out, "FP8_DEFAULT_CFG")
    reference: dict[str, np.ndarray] = {}
    for prefix in LINEARS:
        w = tensors[f"{prefix}.weight"]
        q = FP8QTensor(w.shape, torch.float32, w)
        scale = tensors[f"{prefix}.weight_scale"].to(torch.float32)
        reference[f"{prefix}.weight"] = f32(q.dequantize(dtype=torch.float32, scale=scale))
    return Built(out, reference, passthrough_of(base, out, LINEARS))


def fp8_block_weight_only(base: Path, out: Path) -> Built:
    """``FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG``: 128x128 blocks, ``weight_scale`` ``[g0, 1, g1, 1]``."""
    from modelopt.torch.quantization.qtensor.fp8_tensor import FP8QTensor

    tensors = _export(base, out, "FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG")
    blocks = {-1: PRESET_BLOCK, -2: PRESET_BLOCK}
    reference: dict[str, np.ndarray] = {}
    for prefix in LINEARS:
        w = tensors[f"{prefix}.weight"]
        stored = tensors[f"{prefix}.weight_scale"]
        # [g0, 1, g1, 1]; a weight of one block gets a 0-d scale.
        grid = tuple(-(-n // PRESET_BLOCK) for n in w.shape)
        assert stored.numel() == grid[0] * grid[1], (prefix, tuple(stored.shape))
        q = FP8QTensor(w.shape, torch.float32, w)
        scale = stored.to(torch.float32).reshape(grid)
        value = q.dequantize(dtype=torch.float32, scale=scale, block_sizes=blocks)
        reference[f"{prefix}.weight"] = f32(value)
    return Built(out, reference, passthrough_of(base, out, LINEARS))


def nvfp4(base: Path, out: Path) -> Built:
    """``NVFP4_DEFAULT_CFG``: E2M1 nibbles in ``weight`` U8, F8_E4M3 ``weight_scale`` per
    16, F32 ``weight_scale_2``; the oracle is ``NVFP4QTensor.dequantize`` in float32."""
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    tensors = _export(base, out, "NVFP4_DEFAULT_CFG")
    reference: dict[str, np.ndarray] = {}
    for prefix in LINEARS:
        packed = tensors[f"{prefix}.weight"]
        shape = (packed.shape[0], packed.shape[1] * 2)
        q = NVFP4QTensor(torch.Size(shape), torch.float32, packed)
        value = q.dequantize(
            dtype=torch.float32,
            scale=tensors[f"{prefix}.weight_scale"],
            double_scale=tensors[f"{prefix}.weight_scale_2"].to(torch.float32),
            block_sizes={-1: 16},
        )
        reference[f"{prefix}.weight"] = f32(value)
    return Built(out, reference, passthrough_of(base, out, LINEARS))
