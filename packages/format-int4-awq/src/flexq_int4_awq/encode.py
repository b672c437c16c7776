"""Quantize float32 [out, in] weights into AutoAWQ's INT4 checkpoint tensors.

For tests, the demo (``flexq_encode``, through :func:`save_awq_checkpoint`)
and ``flexq convert`` style tools: produces exactly the
tensors AutoAWQ's ``WQLinear_GEMM`` / ``WQLinear_GEMV`` store, with the math of
AutoAWQ's ``pseudo_quantize_tensor`` (zero-point mode), per group of
``group_size`` input columns:

    s = max(max - min, 1e-5) / 15          stored as F16
    z = clamp(-round(min / s), 0, 15)
    q = clamp(round(w / s) + z, 0, 15)

z and q are computed with the F16 scale the checkpoint stores (widened to
float32), so dequantizing the result reproduces (q - z) * s exactly.
``round`` is round-half-to-even, as in torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flexq import RawTensor, save_checkpoint
from flexq_int4_awq.layout import PACK, gemv_zeros_width, slots_for


def quantize(
    weight: np.ndarray, group_size: int, version: str = "gemm", *, prefix: str = ""
) -> dict[str, RawTensor]:
    """AWQ INT4 tensors for one linear's float32 ``weight`` [out, in].

    :param group_size: input columns per scale/zero group; -1 for one group over all of in.
    :param version: ``"gemm"`` or ``"gemv"`` (the layout, as in the config's ``version``).
    :param prefix: module name; keys are ``f"{prefix}.qweight"`` etc. (bare names without it).
    :return: ``qweight`` I32, ``qzeros`` I32 and ``scales`` F16 in the layout's shapes.
    :raises ValueError: on a shape the layout cannot hold, a non-finite weight or a
        scale beyond float16's range.
    """
    w = np.asarray(weight, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {w.shape}")
    if version not in ("gemm", "gemv"):
        raise ValueError(f"version must be 'gemm' or 'gemv', got {version!r}")
    out_f, in_f = w.shape
    g = in_f if group_size == -1 else group_size
    if g <= 0 or in_f == 0 or in_f % g:
        raise ValueError(f"in_features {in_f} is not a positive multiple of group_size {g}")
    if not np.isfinite(w).all():
        raise ValueError("weight has non-finite values")
    q, z, s = quantize_codes(w, g)
    if version == "gemm":
        if out_f % PACK:
            raise ValueError(f"GEMM packs out_features in eights; got {out_f}")
        tensors = {
            "qweight": pack_int4(q.T, slots_for("gemm")),
            "qzeros": pack_int4(z.T, slots_for("gemm")),
            "scales": np.ascontiguousarray(s.T),
        }
    else:
        width = gemv_zeros_width(in_f // g, g)
        if in_f % PACK or width is None:
            raise ValueError(
                f"GEMV needs in_features % 8 == 0 and group_size >= 128, 64 or 32; "
                f"got in_features {in_f}, group_size {g}"
            )
        zeros = np.zeros((out_f, width * PACK), dtype=z.dtype)
        zeros[:, : z.shape[1]] = z
        scales = np.zeros((out_f, width * PACK), dtype=np.float16)
        scales[:, : s.shape[1]] = s
        tensors = {
            "qweight": pack_int4(q, slots_for("gemv")),
            "qzeros": pack_int4(zeros, slots_for("gemv")),
            "scales": scales,
        }
    name = f"{prefix}." if prefix else ""
    return {f"{name}{k}": RawTensor.of(v) for k, v in tensors.items()}


def pack_int4(codes: np.ndarray, slots: Sequence[int]) -> np.ndarray:
    """Pack codes 0..15 [R, 8C] into int32 words [R, C]; element j goes to slot ``slots[j]``.

    :raises ValueError: on codes outside 0..15 or a width that is not a multiple of 8.
    """
    codes = np.asarray(codes)
    rows, width = codes.shape
    if width % 8:
        raise ValueError(f"cannot pack {width} codes per row into int32 words of 8")
    if codes.size and (codes.min() < 0 or codes.max() > 15):
        raise ValueError("4-bit codes must lie in 0..15")
    groups = codes.astype(np.uint32).reshape(rows, width // 8, 8)
    words = np.zeros((rows, width // 8), dtype=np.uint32)
    for j, slot in enumerate(slots):
        words |= groups[:, :, j] << np.uint32(4 * slot)
    return words.view(np.int32)


def quantize_codes(w: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes q [out, in] (uint8), zeros z [out, in/g] (uint8), F16 scales s [out, in/g]."""
    out_f, in_f = w.shape
    groups = w.reshape(out_f, in_f // g, g)
    hi, lo = groups.max(axis=2), groups.min(axis=2)
    wide = np.maximum(hi - lo, np.float32(1e-5)) / np.float32(15)
    with np.errstate(over="ignore"):
        s16 = wide.astype(np.float16)
    if not np.isfinite(s16).all():
        raise ValueError("a group's range is too large for a float16 scale")
    s = s16.astype(np.float32)
    z = np.clip(-np.round(lo / s), 0, 15)
    q = np.clip(np.round(groups / s[:, :, None]) + z[:, :, None], 0, 15)
    return q.reshape(out_f, in_f).astype(np.uint8), z.astype(np.uint8), s16


def quantization_config(group_size: int, version: str = "gemm", **extra: Any) -> dict[str, Any]:
    """The ``quantization_config`` AutoAWQ writes for these settings (plus ``extra`` keys)."""
    return {
        "quant_method": "awq",
        "bits": 4,
        "group_size": group_size,
        "zero_point": True,
        "version": version,
        **extra,
    }


def save_awq_checkpoint(
    directory: str | os.PathLike[str],
    weights: Mapping[str, np.ndarray],
    group_size: int,
    version: str = "gemm",
    others: Mapping[str, RawTensor] | None = None,
) -> Path:
    """Quantize ``weights`` (``X.weight`` -> float32 [out, in]) and write them with
    ``others`` and AutoAWQ's config.json into ``directory``."""
    tensors = dict(others or {})
    for key, w in weights.items():
        tensors.update(quantize(w, group_size, version, prefix=key.removesuffix(".weight")))
    config = {"quantization_config": quantization_config(group_size, version)}
    return save_checkpoint(directory, tensors, config=config)
