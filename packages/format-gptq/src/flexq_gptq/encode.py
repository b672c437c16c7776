"""Quantize float32 [out, in] weights into GPTQ checkpoint tensors (round trips, the demo).

Writes the tensors AutoGPTQ / GPTQModel store, with the math of their
``Quantizer.find_params`` per group of input columns and output row:

    xmin = min(min(w), 0), xmax = max(max(w), 0)
    sym:  xmax = max(|xmin|, xmax), xmin = -xmax if xmin < 0;  z = (maxq + 1) / 2
    both: xmin = -1, xmax = 1 when both are 0;  s = (xmax - xmin) / maxq
    asym: z = round(-xmin / s)
    q = clamp(round(w / s) + z, 0, maxq)

s is stored as F16 and q is computed with that stored scale (widened to
float32), so dequantizing the result reproduces ``s * (q - z)`` exactly.
``round`` is round-half-to-even, as in torch. With ``desc_act`` the input
columns are grouped in the order ``perm`` (act-order) and ``g_idx`` records
each column's group; GPTQ v1 zeros are stored as z - 1 by the whole-word
subtraction the producers use (:mod:`flexq_gptq.decode` explains it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexq import RawTensor
from flexq_gptq.packing import BITS, Packing, pack_codes


def group_index(in_f: int, group_size: int, perm: np.ndarray | None) -> np.ndarray:
    """g_idx: the group of each input column; with ``perm`` (act-order) the columns are
    grouped in that order, as GPTQ does after sorting them by its Hessian diagonal."""
    g = in_f if group_size == -1 else group_size
    if perm is None:
        return (np.arange(in_f) // g).astype(np.int32)
    order = np.asarray(perm)
    if sorted(order.tolist()) != list(range(in_f)):
        raise ValueError(f"perm must be a permutation of range({in_f})")
    g_idx = np.empty(in_f, np.int32)
    g_idx[order] = np.arange(in_f) // g
    return g_idx


def quantize_codes(
    w: np.ndarray, bits: int, g_idx: np.ndarray, n_groups: int, sym: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q [out, in], z [n_groups, out], s [n_groups, out] F16) for float32 ``w``."""
    maxq = (1 << bits) - 1
    out_f = w.shape[0]
    q = np.empty(w.shape, np.int64)
    z = np.empty((n_groups, out_f), np.int64)
    s = np.empty((n_groups, out_f), np.float16)
    for k in range(n_groups):
        cols = np.flatnonzero(g_idx == k)
        x = w[:, cols]
        xmin = np.minimum(x.min(axis=1, initial=0.0), 0.0)
        xmax = np.maximum(x.max(axis=1, initial=0.0), 0.0)
        if sym:
            xmax = np.maximum(np.abs(xmin), xmax)
            xmin = np.where(xmin < 0, -xmax, xmin)
        both_zero = (xmin == 0) & (xmax == 0)
        xmin, xmax = np.where(both_zero, -1.0, xmin), np.where(both_zero, 1.0, xmax)
        scale16 = ((xmax - xmin) / maxq).astype(np.float16)
        if not np.isfinite(scale16).all() or (scale16 == 0).any():
            raise ValueError(f"group {k}: a scale does not fit float16")
        scale = scale16.astype(np.float32)
        zero = np.full(out_f, (maxq + 1) // 2) if sym else np.rint(-xmin / scale)
        zero = np.clip(zero, 0, maxq).astype(np.int64)
        q[:, cols] = np.clip(np.rint(x / scale[:, None]) + zero[:, None], 0, maxq)
        z[k], s[k] = zero, scale16
    return q, z, s


def pack_zeros(z: np.ndarray, bits: int, minus_one: bool) -> np.ndarray:
    """qzeros [n_groups, out*bits/32] of zeros ``z`` [n_groups, out]; v1 stores z - 1 as
    the producers do (whole-word subtraction for 2/4/8 bits, field by field for 3)."""
    if not minus_one:
        return pack_codes(z, bits, axis=1)
    p = Packing(bits)
    if bits == 3:
        return pack_codes((z - 1) % 8, bits, axis=1)
    words = pack_codes(z, bits, axis=1).view(np.uint32)
    (offset,) = p.v1_word_offsets()
    return (words - np.uint32(offset)).view(np.int32)


def quantize(
    weight: np.ndarray,
    bits: int = 4,
    group_size: int = 128,
    *,
    sym: bool = True,
    perm: np.ndarray | None = None,
    v1: bool = True,
    g_idx: bool = True,
    prefix: str = "",
) -> dict[str, RawTensor]:
    """GPTQ tensors for one linear's float32 ``weight`` [out, in].

    :param group_size: input columns per group; -1 for one group over all of in.
    :param perm: act-order column order (``desc_act: true``), None for ``i // g`` groups.
    :param v1: store zeros as z - 1 (``checkpoint_format`` "gptq"), else z ("gptq_v2").
    :param g_idx: write ``g_idx`` (every AutoGPTQ/GPTQModel checkpoint has it).
    :param prefix: module name; keys are ``f"{prefix}.qweight"`` etc.
    :raises ValueError: on a shape the layout cannot hold or a non-finite weight.
    """
    w = np.asarray(weight, dtype=np.float32)
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("weight has non-finite values")
    if perm is not None and not g_idx:
        raise ValueError("act-order (perm) needs g_idx")
    out_f, in_f = w.shape
    p = Packing(bits)
    if in_f % p.unit_codes or out_f % p.unit_codes:
        raise ValueError(f"{bits}-bit GPTQ needs in and out multiples of {p.unit_codes}")
    g = in_f if group_size == -1 else group_size
    if g <= 0:
        raise ValueError(f"group_size must be -1 or positive, got {group_size}")
    n_groups = -(-in_f // g)
    groups = group_index(in_f, group_size, perm)
    q, z, s = quantize_codes(w, bits, groups, n_groups, sym)
    tensors: dict[str, np.ndarray] = {
        "qweight": pack_codes(q.T, bits, axis=0),
        "qzeros": pack_zeros(z, bits, v1),
        "scales": s,
    }
    if g_idx:
        tensors["g_idx"] = groups
    name = f"{prefix}." if prefix else ""
    return {f"{name}{k}": RawTensor.of(np.ascontiguousarray(v)) for k, v in tensors.items()}


def quantization_config(
    bits: int = 4,
    group_size: int = 128,
    *,
    sym: bool = True,
    desc_act: bool = False,
    v1: bool = True,
) -> dict[str, Any]:
    """The ``quantization_config`` AutoGPTQ (v1) or GPTQModel (v2) writes for these settings."""
    return {
        "quant_method": "gptq",
        "bits": bits,
        "group_size": group_size,
        "desc_act": desc_act,
        "sym": sym,
        "damp_percent": 0.01,
        "true_sequential": True,
        "checkpoint_format": "gptq" if v1 else "gptq_v2",
    }
