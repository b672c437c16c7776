"""FP8 E4M3 encoder: float32 weights -> F8_E4M3 codes plus scales, and whole checkpoints.

For tests, the demo (``flexq_encode``) and users who want an FP8 checkpoint
from float weights. The element encoder is exact round-to-nearest-even with
subnormals (the same bytes torch and ml_dtypes produce); :func:`quantize`
clamps to +-448 first, as every producer does, so no NaN appears for finite
inputs. :func:`save_fp8_checkpoint` writes the ``quantization_config`` the
chosen producer would write, so the checkpoint looks like a published one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from flexq import RawTensor, save_checkpoint
from flexq.formatkit import E8M0_TO_FLOAT32, ceil_div
from flexq.formatkit.rounding import bfloat16_bits_to_float32, float32_to_bfloat16_bits
from flexq_fp8.layout import DEFAULT_BLOCK

E4M3_MAX = 448.0
#: Smallest normal E4M3 magnitude; below it values are multiples of 2^-9.
_MIN_NORMAL = np.float32(2.0**-6)

Layout = Literal["tensor", "channel", "group", "block"]
ScaleDtype = Literal["F32", "F16", "BF16", "F8_E8M0", "U8"]


def encode_e4m3(values: np.ndarray) -> np.ndarray:
    """float32 -> E4M3FN bytes (uint8), round to nearest even, subnormals kept.

    Like torch and ml_dtypes, magnitudes that round above 448 (> 464), infinities
    and NaN become NaN (0x7F, sign kept); clamp first to saturate instead.
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    sign = ((bits >> 24) & 0x80).astype(np.uint8)
    mag = bits & np.uint32(0x7FFFFFFF)
    # Normal range: round the 23-bit mantissa to 3 bits (ties to even) on the bit
    # pattern; a carry moves into the exponent by itself. Rebias 127 -> 7.
    rounded = (mag + np.uint32(0x7FFFF) + ((mag >> 20) & 1)) >> 20
    normal = rounded.astype(np.int64) - (120 << 3)
    # Subnormal range: the value is m * 2^-9; scaling by 2^9 is exact, rint is RNE.
    magnitude = mag.view(np.float32)
    small = magnitude < _MIN_NORMAL  # False for NaN
    subnormal = np.rint(np.where(small, magnitude, 0) * np.float32(512.0)).astype(np.int64)
    code = np.where(small, subnormal, normal)
    code = np.where((code > 0x7E) | ~np.isfinite(magnitude), 0x7F, code)
    return code.astype(np.uint8) | sign


def quantize(
    weight: np.ndarray,
    *,
    layout: Layout = "block",
    block_size: int | tuple[int, int] | None = None,
    scale_dtype: ScaleDtype = "F32",
    key: str = "weight",
    scale_suffix: str | None = None,
) -> dict[str, RawTensor]:
    """Quantize ``weight`` ([out, in], or stacked [E, out, in]) to FP8 E4M3 with scales.

    :param layout: ``tensor`` (one scale; 0-d for a 2-D weight), ``channel``
        (``[out, 1]``), ``group`` (``[out, ceil(in/g)]``, compressed-tensors) or
        ``block`` (``[ceil(out/b0), ceil(in/b1)]``). Leading dims get one scale
        grid per index.
    :param block_size: ``(b0, b1)`` for ``block`` (default 128x128), ``g`` for
        ``group`` (default 128).
    :param scale_dtype: F32, F16, BF16, or E8M0 powers of two stored as
        ``F8_E8M0`` or plain ``U8``.
    :param key: the weight's key; the scale is ``key + scale_suffix``.
    :param scale_suffix: default ``_scale_inv`` for ``block``, ``_scale`` otherwise.
    :return: ``{key: F8_E4M3 weight, key + suffix: scale}``.
    """
    w = np.asarray(weight, dtype=np.float32)
    if w.ndim < 2:
        raise ValueError(f"quantize needs a weight with at least 2 dims, got shape {w.shape}")
    block = _block(w.shape, layout, block_size)
    grid = tuple(ceil_div(s, b) for s, b in zip(w.shape, block, strict=True))
    amax = _block_amax(np.abs(w), block, grid)
    raw = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1.0)).astype(np.float32)
    stored, scale = _round_scale(raw, scale_dtype)
    expanded = _expand(scale, block, w.shape)
    codes = encode_e4m3(np.clip(w / expanded, -E4M3_MAX, E4M3_MAX))
    if layout == "tensor" and w.ndim == 2:
        stored = RawTensor(stored.dtype, stored.data.reshape(()))
    suffix = (
        scale_suffix
        if scale_suffix is not None
        else ("_scale_inv" if layout == "block" else "_scale")
    )
    return {key: RawTensor("F8_E4M3", codes), key + suffix: stored}


def _block(
    shape: tuple[int, ...], layout: Layout, size: int | tuple[int, int] | None
) -> tuple[int, ...]:
    lead = (1,) * (len(shape) - 2)
    out, inp = max(shape[-2], 1), max(shape[-1], 1)
    if layout == "tensor":
        return (*lead, out, inp)
    if layout == "channel":
        return (*lead, 1, inp)
    if layout == "group":
        g = DEFAULT_BLOCK if size is None else size
        if not isinstance(g, int) or g <= 0:
            raise ValueError(f"group layout takes one positive group size, got {size!r}")
        return (*lead, 1, g)
    if layout == "block":
        b = (DEFAULT_BLOCK, DEFAULT_BLOCK) if size is None else size
        if isinstance(b, int) or len(b) != 2 or min(b) <= 0:
            raise ValueError(f"block layout takes (rows, cols) block sizes, got {size!r}")
        return (*lead, int(b[0]), int(b[1]))
    raise ValueError(f"unknown FP8 layout {layout!r}: tensor, channel, group or block")


def _block_amax(a: np.ndarray, block: tuple[int, ...], grid: tuple[int, ...]) -> np.ndarray:
    """max |w| over each block of the ceil grid (edge blocks padded with zeros)."""
    padded = np.zeros([g * b for g, b in zip(grid, block, strict=True)], dtype=np.float32)
    padded[tuple(slice(0, s) for s in a.shape)] = a
    split = [n for gb in zip(grid, block, strict=True) for n in gb]
    amax: np.ndarray = padded.reshape(split).max(axis=tuple(range(1, 2 * len(grid), 2)))
    return amax


def _expand(scale: np.ndarray, block: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    for d, b in enumerate(block):
        scale = np.repeat(scale, b, axis=d)
    return scale[tuple(slice(0, s) for s in shape)]


def _round_scale(raw: np.ndarray, dtype: ScaleDtype) -> tuple[RawTensor, np.ndarray]:
    """The stored scale and the exact float32 value a reader decodes from it."""
    if dtype == "F32":
        return RawTensor("F32", raw), raw
    if dtype == "F16":
        half = raw.astype(np.float16)
        return RawTensor("F16", half), half.astype(np.float32)
    if dtype == "BF16":
        bits = float32_to_bfloat16_bits(raw)
        return RawTensor("BF16", bits), bfloat16_bits_to_float32(bits)
    if dtype in ("F8_E8M0", "U8"):
        # Round the scale UP to a power of two (DeepSeek-V3.1 "ue8m0") so that
        # |w| / scale stays within 448.
        mant, exp = np.frexp(raw)
        e = np.clip(np.where(mant == 0.5, exp - 1, exp), -127, 127)
        codes = np.where(np.isfinite(raw), e + 127, 255).astype(np.uint8)
        value = E8M0_TO_FLOAT32[codes]
        return RawTensor(dtype, codes), value
    raise ValueError(f"unknown scale dtype {dtype!r}: F32, F16, BF16, F8_E8M0 or U8")


#: Whose config.json dialect (and scale names) to write.
Producer = Literal["fp8", "fbgemm", "compressed-tensors"]
_DEFAULT_PRODUCER: dict[str, Producer] = {
    "tensor": "fp8",
    "block": "fp8",
    "channel": "fbgemm",
    "group": "compressed-tensors",
}
_PRODUCER_LAYOUTS: dict[Producer, tuple[str, ...]] = {
    "fp8": ("tensor", "block"),
    "fbgemm": ("channel",),
    "compressed-tensors": ("tensor", "channel", "group", "block"),
}


def save_fp8_checkpoint(
    directory: str | os.PathLike[str],
    weights: Mapping[str, np.ndarray],
    *,
    layout: Layout = "block",
    block_size: int | tuple[int, int] | None = None,
    scale_dtype: ScaleDtype = "F32",
    producer: Producer | None = None,
    others: Mapping[str, RawTensor] | None = None,
    ignored: Sequence[str] = (),
    shard_of: Mapping[str, int] | None = None,
    max_shard_bytes: int | None = None,
    torch_dtype: str = "bfloat16",
) -> Path:
    """Quantize ``weights`` (key -> float array) and write them with ``others`` to ``directory``.

    :param producer: ``fp8`` (vLLM / DeepSeek names and config), ``fbgemm`` or
        ``compressed-tensors``; defaults by layout.
    :param others: tensors written as they are (norms, embeddings, ignored layers).
    :param ignored: module names the config lists as unquantized.
    :param shard_of: tensor key (weights, their scales, others) -> shard number.
    :return: the directory.
    """
    producer = producer or _DEFAULT_PRODUCER[layout]
    if layout not in _PRODUCER_LAYOUTS[producer]:
        raise ValueError(f"producer {producer!r} does not write the {layout!r} layout")
    suffix = "_scale_inv" if (producer, layout) == ("fp8", "block") else "_scale"
    tensors: dict[str, RawTensor] = {}
    for key, w in weights.items():
        tensors.update(
            quantize(
                w,
                layout=layout,
                block_size=block_size,
                scale_dtype=scale_dtype,
                key=key,
                scale_suffix=suffix,
            )
        )
    tensors.update(others or {})
    qc = quantization_config(producer, layout, block_size, scale_dtype, ignored)
    config = {"torch_dtype": torch_dtype, "quantization_config": qc}
    return save_checkpoint(
        directory, tensors, config=config, shard_of=shard_of, max_shard_bytes=max_shard_bytes
    )


def quantization_config(
    producer: Producer,
    layout: Layout,
    block_size: int | tuple[int, int] | None,
    scale_dtype: ScaleDtype,
    ignored: Sequence[str],
) -> dict[str, Any]:
    """The ``quantization_config`` ``producer`` writes for ``layout``."""
    if producer == "fbgemm":
        return {
            "quant_method": "fbgemm_fp8",
            "activation_scale_ub": 1200.0,
            "modules_to_not_convert": list(ignored),
        }
    if producer == "fp8":
        qc: dict[str, Any] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
        if layout == "block":
            qc["fmt"] = "e4m3"
            qc["weight_block_size"] = list(_pair(block_size))
            if scale_dtype in ("F8_E8M0", "U8"):
                qc["scale_fmt"] = "ue8m0"
            qc["modules_to_not_convert"] = list(ignored)
        else:
            qc["ignored_layers"] = list(ignored)
        return qc
    weights: dict[str, Any] = {
        "num_bits": 8,
        "type": "float",
        "symmetric": True,
        "dynamic": False,
        "strategy": layout,
        "group_size": None,
        "block_structure": None,
    }
    if layout == "group":
        weights["group_size"] = DEFAULT_BLOCK if block_size is None else block_size
    if layout == "block":
        weights["block_structure"] = list(_pair(block_size))
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None}
        },
        "ignore": list(ignored),
    }


def _pair(block_size: int | tuple[int, int] | None) -> tuple[int, int]:
    if block_size is None:
        return DEFAULT_BLOCK, DEFAULT_BLOCK
    if isinstance(block_size, int):
        return block_size, block_size
    return int(block_size[0]), int(block_size[1])
