"""auto-round 0.15.1 in RTN mode (``iters=0``) on CPU, one builder per export.

``AutoRound(...).quantize_and_save(dir, format=...)`` writes into a subfolder
of ``dir`` (found with :func:`~.base.checkpoint_dir`). Oracles are auto-round's
own dequantizing modules, run in float32:

- FP8 (``auto_round`` format): ``WeightFP8ActFP8StaticQuantLinear.dequant_weight_online``
  (``weight.to(dtype) * weight_scale.unsqueeze(1)``) built with ``dtype=float32``.
- native ``auto_round`` int4 (``packing_format: auto_round:auto_gptq``) and the
  ``auto_gptq`` export: both store GPTQ v1 zeros (minus one; the packer is
  ``qlinear_torch_zp``, and auto-round's backend table marks the format
  "zp+-1"), read back by auto-round's ``auto_round:torch_zp`` backend module
  ``auto_round_extension.torch.qlinear_torch_zp.QuantLinear`` (its forward adds
  the one back). The oracle runs that module's forward with float32 scales and
  ``torch.matmul`` standing in as "return the weight", so the module's own
  dequantized weight comes out as it is: auto-round's symmetric scales can be
  negative, and an identity matmul would turn the resulting -0.0 into +0.0. The
  module's g_idx branch slices ``scales`` along ``out`` in ``in``-sized chunks
  (wrong whenever out > in: gate/up here), so the oracle checks that the
  export's g_idx is the trivial ``i // group_size`` and runs the group path.
- ``auto_awq`` export: AutoAWQ's ``dequantize_gemm`` (what loads it).
- NVFP4 (``auto_round`` format): ``NVFP4QuantLinear._dequant_nvfp4_tensor`` in
  float32, which computes ``e2m1 * (1 / global_scale) * scale``; NVFP4 through
  the ``llm_compressor`` export goes through compressed-tensors' decompressor.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
import torch

from .base import (
    LINEARS,
    Built,
    calibration_texts,
    checkpoint_dir,
    f32,
    load_base,
    passthrough_of,
    read_safetensors,
)
from .compressed_tensors_ref import ct_reference


def _quantize(base: Path, out: Path, scheme: str, fmt: str, **kwargs: Any) -> Path:
    from auto_round import AutoRound
    from transformers import AutoTokenizer

    rounder = AutoRound(
        load_base(base),
        tokenizer=AutoTokenizer.from_pretrained(base),
        scheme=scheme,
        iters=0,
        device_map="cpu",
        dataset=calibration_texts(),
        nsamples=len(calibration_texts()),
        seqlen=16,
        **kwargs,
    )
    rounder.quantize_and_save(str(out), format=fmt)
    return checkpoint_dir(out)


def _fp8_reference(path: Path) -> dict[str, np.ndarray]:
    from auto_round.experimental.qmodules.fp8_static import WeightFP8ActFP8StaticQuantLinear

    tensors = read_safetensors(path)
    out = {}
    for prefix in LINEARS:
        weight = tensors[f"{prefix}.weight"]
        module = WeightFP8ActFP8StaticQuantLinear(
            weight.shape[1],
            weight.shape[0],
            weight=weight,
            weight_scale=tensors[f"{prefix}.weight_scale"].to(torch.float32),
            dtype=torch.float32,
        )
        out[f"{prefix}.weight"] = f32(module.dequant_weight_online())
    return out


def fp8(base: Path, out: Path) -> Built:
    """``FPW8A16`` in the ``auto_round`` format: FP8 weight, per-tensor scale ``[1]``."""
    path = _quantize(base, out, "FPW8A16", "auto_round")
    return Built(path, _fp8_reference(path), passthrough_of(base, path, LINEARS))


def fp8_static(base: Path, out: Path) -> Built:
    """``FP8_STATIC`` in the ``auto_round`` format: per-channel scale ``[out]``, input scale."""
    path = _quantize(base, out, "FP8_STATIC", "auto_round")
    return Built(path, _fp8_reference(path), passthrough_of(base, path, LINEARS))


def _weight_of_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``matmul(x, weight)`` replaced by ``weight``: the module's forward then returns it."""
    return weight


def _qlinear_reference(path: Path, group_size: int) -> dict[str, np.ndarray]:
    from auto_round_extension.torch.qlinear_torch_zp import QuantLinear

    tensors = read_safetensors(path)
    out = {}
    for prefix in LINEARS:
        scales = tensors[f"{prefix}.scales"]
        qzeros = tensors[f"{prefix}.qzeros"]
        in_features = tensors[f"{prefix}.qweight"].shape[0] * 8
        g_idx = tensors.get(f"{prefix}.g_idx")
        if g_idx is not None:
            # See the module docstring: the g_idx branch is wrong when out > in.
            assert torch.equal(g_idx, torch.arange(in_features, dtype=g_idx.dtype) // group_size)
        module = QuantLinear(4, group_size, in_features, scales.shape[1], False)
        module.qweight = tensors[f"{prefix}.qweight"]
        module.qzeros = qzeros
        module.scales = scales.to(torch.float32)
        with torch.no_grad(), mock.patch.object(torch, "matmul", _weight_of_matmul):
            wt = module(torch.zeros(in_features, in_features, dtype=torch.float32))  # [in, out]
        out[f"{prefix}.weight"] = f32(wt.T)
    return out


def native(base: Path, out: Path) -> Built:
    """``W4A16`` group 32 in auto-round's own format (``quant_method: auto-round``)."""
    path = _quantize(base, out, "W4A16", "auto_round", group_size=32)
    return Built(path, _qlinear_reference(path, 32), passthrough_of(base, path, LINEARS))


def auto_gptq(base: Path, out: Path) -> Built:
    """``W4A16`` group 64 exported as AutoGPTQ v1 (``quant_method: gptq``, with g_idx)."""
    path = _quantize(base, out, "W4A16", "auto_gptq", group_size=64)
    return Built(path, _qlinear_reference(path, 64), passthrough_of(base, path, LINEARS))


def auto_awq(base: Path, out: Path) -> Built:
    """``W4A16`` group 64 exported as AWQ GEMM (``zero_point: false``, zeros of 8)."""
    from awq.utils.packing_utils import dequantize_gemm

    path = _quantize(base, out, "W4A16", "auto_awq", group_size=64)
    tensors = read_safetensors(path)
    reference = {}
    for prefix in LINEARS:
        wt = dequantize_gemm(
            tensors[f"{prefix}.qweight"],
            tensors[f"{prefix}.qzeros"],
            tensors[f"{prefix}.scales"].to(torch.float32),
            4,
            64,
        )
        reference[f"{prefix}.weight"] = f32(wt.T)
    return Built(path, reference, passthrough_of(base, path, LINEARS))


def nvfp4(base: Path, out: Path) -> Built:
    """``NVFP4`` in the ``auto_round`` format (``packing_format: auto_round:llm_compressor``)."""
    from auto_round.experimental.qmodules.nvfp4 import NVFP4QuantLinear

    path = _quantize(base, out, "NVFP4", "auto_round")
    tensors = read_safetensors(path)
    reference = {}
    for prefix in LINEARS:
        # The module's dequantizer needs only these attributes of the module.
        module = SimpleNamespace(
            weight_global_scale=tensors[f"{prefix}.weight_global_scale"],
            group_size=16,
            dtype=torch.float32,
        )
        module.unpack_data = lambda p, m=module: NVFP4QuantLinear.unpack_data(m, p)
        weight = NVFP4QuantLinear._dequant_nvfp4_tensor(
            module,
            tensors[f"{prefix}.weight_packed"],
            tensors[f"{prefix}.weight_scale"],
            torch.float32,
        )
        reference[f"{prefix}.weight"] = f32(weight)
    return Built(path, reference, passthrough_of(base, path, LINEARS))


def nvfp4_llm_compressor(base: Path, out: Path) -> Built:
    """``NVFP4`` through auto-round's ``llm_compressor`` export (compressed-tensors)."""
    path = _quantize(base, out, "NVFP4", "llm_compressor")
    return Built(path, ct_reference(path), passthrough_of(base, path, LINEARS))
