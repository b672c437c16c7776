"""AutoAWQ 0.2.9: the full AWQ search (scale search, clipping) on CPU, GEMM and GEMV.

``AutoAWQForCausalLM.quantize`` runs on CPU for the tiny model and
``save_quantized`` writes the checkpoint. AWQ folds its activation scales into
the preceding norms, so the unquantized tensors to compare with are the
quantized model's own (in memory), not the base model's.

Oracles: GEMM goes through AutoAWQ's own ``awq.utils.packing_utils.dequantize_gemm``
(scales widened to float32 first: it multiplies in the scales' float16 otherwise).
AutoAWQ ships no GEMV dequantizer (its GEMV forward needs the CUDA ``awq_ext``
kernels), so GEMV uses the producer's math read off ``WQLinear_GEMV.from_linear``:
codes in sequential nibbles along ``in``, zeros packed the same way and padded to
``calculate_zeros_width``, W = (q - z) * s.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .base import LINEARS, Built, calibration_texts, f32, passthrough_of, read_safetensors


def _quantize(
    base: Path, out: Path, version: str, group_size: int
) -> tuple[Path, dict[str, torch.Tensor]]:
    from awq import AutoAWQForCausalLM
    from transformers import AutoTokenizer

    model = AutoAWQForCausalLM.from_pretrained(str(base), device_map="cpu")
    tokenizer = AutoTokenizer.from_pretrained(base)
    # AutoAWQ drops samples longer than max_calib_seq_len, then cuts the rest into blocks.
    texts = [" ".join(t.split()[:24]) for t in calibration_texts() * 2]
    model.quantize(
        tokenizer,
        quant_config={
            "zero_point": True,
            "q_group_size": group_size,
            "w_bit": 4,
            "version": version,
        },
        calib_data=texts,
        max_calib_samples=len(texts),
        max_calib_seq_len=32,
    )
    model.save_quantized(str(out))
    state = {k: v.detach().clone() for k, v in model.model.state_dict().items()}
    return out, state


def gemm(base: Path, out: Path) -> Built:
    """AWQ GEMM, group 64, zero point."""
    from awq.utils.packing_utils import dequantize_gemm

    path, state = _quantize(base, out, "GEMM", 64)
    tensors = read_safetensors(path)
    reference = {}
    for prefix in LINEARS:
        qweight, qzeros = tensors[f"{prefix}.qweight"], tensors[f"{prefix}.qzeros"]
        scales = tensors[f"{prefix}.scales"].to(torch.float32)
        wt = dequantize_gemm(qweight, qzeros, scales, 4, 64)  # [in, out]
        reference[f"{prefix}.weight"] = f32(wt.T)
    return Built(path, reference, passthrough_of(state, path, LINEARS))


def _unpack_sequential(words: torch.Tensor) -> torch.Tensor:
    """int32 words [r, c] -> 4-bit codes [r, 8c], nibble i of word j is code 8j + i."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    codes = torch.bitwise_right_shift(words[:, :, None], shifts[None, None, :]) & 0xF
    return codes.reshape(words.shape[0], -1)


def gemv(base: Path, out: Path) -> Built:
    """AWQ GEMV, group 32 (qzeros/scales padded to 4-multiples of 8 groups)."""
    path, state = _quantize(base, out, "GEMV", 32)
    tensors = read_safetensors(path)
    reference = {}
    for prefix in LINEARS:
        q = _unpack_sequential(tensors[f"{prefix}.qweight"])  # [out, in]
        groups = q.shape[1] // 32
        z = _unpack_sequential(tensors[f"{prefix}.qzeros"])[:, :groups]
        s = tensors[f"{prefix}.scales"].to(torch.float32)[:, :groups]
        w = (q - z.repeat_interleave(32, dim=1)).to(torch.float32) * s.repeat_interleave(32, dim=1)
        reference[f"{prefix}.weight"] = f32(w)
    return Built(path, reference, passthrough_of(state, path, LINEARS))
