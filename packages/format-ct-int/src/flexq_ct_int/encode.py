"""Quantize float32 ``[out, in]`` weights into compressed-tensors integer checkpoint tensors.

For round-trip tests, ``flexq demo`` and the format's ``flexq_encode``
(``flexq_ct_int.plugin.DEMO_SCHEME``); real checkpoints come from llm-compressor. The
tensors are laid out exactly as compressed-tensors 0.19.0 writes them (names, dtypes,
shapes, packing, the ``2^(bits-1)`` offset, zero points packed along out for group and channel
strategies), with its min-max parameters per scale block::

    symmetric:  s = max(|min|, |max|) / ((2^bits - 1) / 2),  z = 0
    asymmetric: s = (max - min) / (2^bits - 1),  z = clamp(-2^(bits-1) - round(min / s))
    q = clamp(round(w / s) + z, -2^(bits-1), 2^(bits-1) - 1)

with min <= 0 <= max, and q computed with the scale as stored (BF16/F16/F32),
so dequantizing the tensors gives ``(q - z) * s`` exactly. ``round`` is
half-to-even, as in torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flexq import RawTensor, save_checkpoint
from flexq.formatkit.rounding import bfloat16_bits_to_float32, float32_to_bfloat16_bits
from flexq_ct_int.config import INT, PACK, QUANT_METHOD
from flexq_ct_int.packing import SUPPORTED_BITS, Packing, offset_of, pack_cols, pack_rows


@dataclass(frozen=True)
class WeightScheme:
    """One integer weight scheme, as both the tensors (:func:`quantize`) and the config
    (:func:`quantization_config`) of a checkpoint spell it.

    :ivar fmt: ``"pack-quantized"`` (``weight_packed`` I32 + ``weight_shape``) or
        ``"int-quantized"`` (``weight`` I8; bits must be 8).
    :ivar strategy: ``tensor``, ``channel``, ``group`` (``group_size``) or ``block`` (``block``).
    :ivar scale_dtype: the stored scales' dtype (``BF16``, ``F16``, ``F32``).
    :ivar dense: odd widths as compressed-tensors >= 0.18 packs them (one bit stream),
        else as 0.17 did (``32 // bits`` per word); the config's version follows it.
    """

    fmt: str = PACK
    bits: int = 4
    strategy: str = "group"
    group_size: int | None = 128
    block: tuple[int, int] | None = None
    symmetric: bool = True
    scale_dtype: str = "BF16"
    dense: bool = True


def quantize(
    weight: np.ndarray, scheme: WeightScheme, *, g_idx: np.ndarray | None = None, prefix: str = ""
) -> dict[str, RawTensor]:
    """compressed-tensors tensors for one linear's float32 ``weight`` ``[out, in]``.

    :param g_idx: group act-order (group strategy): the group of each input column.
    :param prefix: module name; keys are ``f"{prefix}.weight_packed"`` etc.
    :raises ValueError: on arguments no compressed-tensors layout has.
    """
    fmt, bits, strategy, symmetric = scheme.fmt, scheme.bits, scheme.strategy, scheme.symmetric
    scale_dtype, dense = scheme.scale_dtype, scheme.dense
    w = np.asarray(weight, dtype=np.float32)
    if w.ndim != 2 or 0 in w.shape:
        raise ValueError(f"weight must be a non-empty [out, in] array, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("weight has non-finite values")
    if fmt not in (PACK, INT) or bits not in SUPPORTED_BITS or (fmt == INT and bits != 8):
        raise ValueError(f"no {fmt} layout with {bits}-bit codes")
    out_f, in_f = w.shape
    b0, b1 = _block(strategy, scheme.group_size, scheme.block, out_f, in_f)
    if g_idx is not None and strategy != "group":
        raise ValueError("g_idx needs the group strategy")
    q, s, z = quantize_codes(w, bits, (b0, b1), symmetric, g_idx, scale_dtype)
    name = f"{prefix}." if prefix else ""
    tensors: dict[str, np.ndarray | RawTensor] = {}
    offset = offset_of(bits)
    if fmt == PACK:
        tensors["weight_packed"] = pack_rows(q + offset, Packing(bits, dense))
    else:
        tensors["weight"] = q.astype(np.int8)
    tensors["weight_scale"] = _stored(s.reshape(1) if strategy == "tensor" else s, scale_dtype)
    if fmt == PACK:
        tensors["weight_shape"] = np.array([out_f, in_f], dtype=np.int64)
    if z is not None:
        if fmt == PACK and strategy in ("group", "channel"):
            tensors["weight_zero_point"] = pack_cols(z + offset, Packing(bits, dense))
        else:
            tensors["weight_zero_point"] = (z.reshape(1) if strategy == "tensor" else z).astype(
                np.int8
            )
    if g_idx is not None:
        tensors["weight_g_idx"] = np.asarray(g_idx, dtype=np.int32)
    return {
        f"{name}{k}": v if isinstance(v, RawTensor) else RawTensor.of(v) for k, v in tensors.items()
    }


def _block(
    strategy: str, group_size: int | None, block: tuple[int, int] | None, out_f: int, in_f: int
) -> tuple[int, int]:
    if strategy == "tensor":
        return out_f, in_f
    if strategy == "channel":
        return 1, in_f
    if strategy == "group":
        if group_size is None or group_size <= 0 or (in_f >= group_size and in_f % group_size):
            raise ValueError(f"group_size {group_size} does not divide in_features {in_f}")
        return 1, group_size
    if strategy == "block" and block is not None and min(block) > 0:
        return block
    raise ValueError(f"strategy {strategy!r} (block {block}) is not a weight strategy")


def quantize_codes(
    w: np.ndarray,
    bits: int,
    block: tuple[int, int],
    symmetric: bool,
    g_idx: np.ndarray | None,
    scale_dtype: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Signed codes q ``[out, in]`` (int32), stored-precision scales (float32 grid) and
    zero points (int32 grid, None when symmetric)."""
    out_f, in_f = w.shape
    b0, b1 = block
    if g_idx is not None:
        idx = np.asarray(g_idx, dtype=np.int64)
        groups = int(idx.max()) + 1
        lo = np.stack([w[:, idx == j].min(axis=1, initial=0.0) for j in range(groups)], 1)
        hi = np.stack([w[:, idx == j].max(axis=1, initial=0.0) for j in range(groups)], 1)
    else:
        gr, gc = -(-out_f // b0), -(-in_f // b1)
        padded = np.full((gr * b0, gc * b1), np.nan, np.float32)
        padded[:out_f, :in_f] = w
        tiles = padded.reshape(gr, b0, gc, b1)
        lo = np.fmin(np.nanmin(tiles, axis=(1, 3)), 0).astype(np.float32)
        hi = np.fmax(np.nanmax(tiles, axis=(1, 3)), 0).astype(np.float32)
    qmin, qmax = -offset_of(bits), offset_of(bits) - 1
    steps = np.float32((1 << bits) - 1)
    raw = np.maximum(-lo, hi) / (steps / np.float32(2)) if symmetric else (hi - lo) / steps
    s = _round_to(raw.astype(np.float32), scale_dtype)
    s = np.where(s == 0, _eps(scale_dtype), s).astype(np.float32)
    z = None
    if not symmetric:
        z = np.clip(qmin - np.round(lo / s), qmin, qmax).astype(np.int32)
    if g_idx is not None:
        s_full = s[:, idx]
        z_full = None if z is None else z[:, idx]
    else:
        s_full = np.repeat(np.repeat(s, b0, 0), b1, 1)[:out_f, :in_f]
        z_full = None if z is None else np.repeat(np.repeat(z, b0, 0), b1, 1)[:out_f, :in_f]
    q = np.round(w / s_full)
    if z_full is not None:
        q += z_full
    return np.clip(q, qmin, qmax).astype(np.int32), s, z


def _round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return bfloat16_bits_to_float32(float32_to_bfloat16_bits(x))
    if dtype == "F16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    return x


def _eps(dtype: str) -> np.float32:
    return np.float32({"BF16": 2.0**-7, "F16": 2.0**-10}.get(dtype, 2.0**-23))


def _stored(s: np.ndarray, dtype: str) -> RawTensor:
    if dtype == "BF16":
        return RawTensor("BF16", float32_to_bfloat16_bits(np.ascontiguousarray(s)))
    if dtype == "F16":
        return RawTensor.of(s.astype(np.float16))
    return RawTensor.of(s.astype(np.float32))


def quantization_config(
    scheme: WeightScheme,
    *,
    act_order: bool = False,
    ignore: Sequence[str] = ("lm_head",),
    targets: Sequence[str] = ("Linear",),
) -> dict[str, Any]:
    """The ``quantization_config`` llm-compressor writes for one weight scheme (its
    ``version`` is the compressed-tensors release that packs as ``scheme.dense`` says)."""
    fmt, strategy, block = scheme.fmt, scheme.strategy, scheme.block
    weights = {
        "actorder": "group" if act_order else None,
        "block_structure": list(block) if strategy == "block" and block else None,
        "dynamic": False,
        "group_size": scheme.group_size if strategy == "group" else None,
        "num_bits": scheme.bits,
        "observer": "minmax",
        "strategy": strategy,
        "symmetric": scheme.symmetric,
        "type": "int",
    }
    activations = None
    if fmt == INT:
        activations = {
            "dynamic": True,
            "num_bits": 8,
            "strategy": "token",
            "symmetric": True,
            "type": "int",
        }
    group = {
        "format": fmt,
        "input_activations": activations,
        "output_activations": None,
        "targets": list(targets),
        "weights": weights,
    }
    return {
        "config_groups": {"group_0": group},
        "format": fmt,
        "ignore": list(ignore),
        "kv_cache_scheme": None,
        "quant_method": QUANT_METHOD,
        "quantization_status": "compressed",
        "version": "0.19.0" if scheme.dense else "0.17.1",
    }


def save_ct_int_checkpoint(
    directory: str | Path,
    weights: Mapping[str, np.ndarray],
    scheme: WeightScheme,
    *,
    others: Mapping[str, RawTensor] | None = None,
    config: Mapping[str, Any] | None = None,
) -> Path:
    """Quantize every ``X.weight`` of ``weights`` with ``scheme`` and write the
    checkpoint with its config.json."""
    tensors = {**(others or {}), **quantize_all(weights, scheme)}
    return save_checkpoint(directory, tensors, config=checkpoint_config(scheme, config))


def quantize_all(weights: Mapping[str, np.ndarray], scheme: WeightScheme) -> dict[str, RawTensor]:
    """The tensors of every ``X.weight`` of ``weights`` quantized with ``scheme``."""
    tensors: dict[str, RawTensor] = {}
    for key, w in weights.items():
        tensors.update(quantize(w, scheme, prefix=key.removesuffix(".weight")))
    return tensors


def checkpoint_config(
    scheme: WeightScheme, config: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """config.json of a checkpoint of ``scheme``: ``config`` (a llama in bfloat16 by
    default) with the scheme's ``quantization_config``."""
    full = {"model_type": "llama", "torch_dtype": "bfloat16", **(config or {})}
    full["quantization_config"] = quantization_config(scheme)
    return full
