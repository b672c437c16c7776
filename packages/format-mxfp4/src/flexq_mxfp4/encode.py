"""The MXFP4 encoder: float arrays -> MXFP4 checkpoint tensors (gpt-oss or compressed-tensors).

For tests, demos (:func:`encode`, the format's ``flexq_encode``) and
``flexq convert``-style tools that need MXFP4 checkpoints.
The rule is the OCP MX / torchao / microxcaling one: per block of 32 elements
along the last axis, ``shared_exp = floor(log2(amax)) - 2`` clamped to
[-127, 127] (an all-zero block gets -127), stored biased by 127; a block with a
NaN or infinity gets scale 0xFF (decodes as NaN). Elements are ``x / 2^shared_exp``
rounded to the nearest E2M1 value, ties to even, saturated at +-6; element 2b
goes to the low nibble of byte b.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from flexq import RawTensor, save_checkpoint
from flexq_mxfp4.layout import BLOCK, PACKED_DTYPES, SCALE_DTYPES, SUFFIXES, Layout, n_blocks

#: E2M1 magnitudes in code order (codes 0..7).
_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
_EMAX_E2M1 = 2  # floor(log2(6))
_NAN_SCALE = 0xFF


def quantize(
    tensors: Mapping[str, npt.ArrayLike],
    *,
    layout: Layout = "gpt-oss",
    packed_dtype: str = "U8",
    scale_dtype: str = "U8",
) -> dict[str, RawTensor]:
    """Quantize float tensors to MXFP4 checkpoint tensors (for :func:`flexq.save_checkpoint`).

    :param tensors: logical key -> float array, as the logical tensor is (the
        unquantized twin): for ``"gpt-oss"`` experts ``[E, in, out]`` (any lead
        ``[..., in, out]``, or a vector ``[in]``), for ``"compressed-tensors"``
        ``[..., in]`` (nn.Linear's ``[out, in]``); blocked along in.
    :param layout: ``"gpt-oss"`` writes ``P_blocks`` U8 [..., out, in/32, 16] and
        ``P_scales`` [..., out, in/32] (in must be a multiple of 32);
        ``"compressed-tensors"`` writes ``X_packed`` [..., in/2] and ``X_scale``
        [..., ceil(in/32)] (name the key ``X.weight``; in must be even).
    :param packed_dtype: ``"U8"`` (what producers write) or ``"F4"``.
    :param scale_dtype: ``"U8"`` (what producers write) or ``"F8_E8M0"``.
    :raises ValueError: on an unsupported layout, dtype or shape.
    """
    if packed_dtype not in PACKED_DTYPES or scale_dtype not in SCALE_DTYPES:
        raise ValueError(
            f"packed_dtype must be one of {PACKED_DTYPES} and scale_dtype one of "
            f"{SCALE_DTYPES}, got {packed_dtype!r}, {scale_dtype!r}"
        )
    if layout not in SUFFIXES:
        raise ValueError(f"unknown MXFP4 layout {layout!r}")
    packed_suffix, scale_suffix = SUFFIXES[layout]
    out: dict[str, RawTensor] = {}
    for key, value in tensors.items():
        x = np.asarray(value, dtype=np.float64)
        if layout == "gpt-oss" and x.ndim >= 2:
            x = np.swapaxes(x, -1, -2)  # [..., in, out] -> the stored [..., out, in]
        n = x.shape[-1] if x.ndim else 0
        if layout == "gpt-oss":
            if x.ndim < 1 or n % BLOCK:
                raise ValueError(
                    f"{key!r}: gpt-oss layout needs [..., 32*G, out] (or [32*G]), "
                    f"got {np.shape(value)}"
                )
        elif x.ndim < 1 or n % 2:
            raise ValueError(f"{key!r}: compressed-tensors layout needs [..., 2k], got {x.shape}")
        packed, scales = quantize_array(x)
        if layout == "gpt-oss":
            packed = packed.reshape(*x.shape[:-1], n // BLOCK, BLOCK // 2)
        out[key + packed_suffix] = RawTensor(packed_dtype, packed)
        out[key + scale_suffix] = RawTensor(scale_dtype, scales)
    return out


def quantize_array(x: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Quantize ``x`` [..., n] (n even) to codes [..., n/2] and E8M0 scales [..., ceil(n/32)].

    A partial last block is quantized as if padded with zeros.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    lead = x.shape[:-1]
    nblk = n_blocks(n)
    blocks = np.zeros((*lead, nblk * BLOCK))
    blocks[..., :n] = x
    blocks = blocks.reshape(*lead, nblk, BLOCK)
    with np.errstate(invalid="ignore"):
        amax = np.max(np.abs(blocks), axis=-1)
    finite = np.isfinite(amax)
    # frexp: amax = f * 2^k with f in [0.5, 1), so floor(log2(amax)) = k - 1 exactly.
    _, k = np.frexp(np.where(finite, amax, 0.0))
    shared = np.where(amax > 0, k - 1 - _EMAX_E2M1, -127)
    shared = np.clip(shared, -127, 127)
    scales = np.where(finite, shared + 127, _NAN_SCALE).astype(np.uint8)
    # Dividing by a power of two is exact in float64 for every float32 input.
    m = np.where(finite[..., None], np.ldexp(blocks, -shared[..., None]), 0.0)
    codes = _e2m1_codes(m).reshape(*lead, nblk * BLOCK)[..., :n]
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return packed, scales


def _e2m1_codes(m: np.ndarray) -> np.ndarray:
    """Nearest E2M1 code (ties to even, saturating at 6) of each value of ``m``."""
    mag = np.abs(m)
    # The E2M1 grid has spacing 0.5 below 2, 1 below 4, 2 above; np.rint rounds
    # ties to even, and on each stretch an even multiple of the spacing is an
    # even code, so this is round-to-nearest-even on the codes.
    q = np.where(
        mag < 2, np.rint(mag * 2) / 2, np.where(mag < 4, np.rint(mag), 2 * np.rint(mag / 2))
    )
    q = np.minimum(q, 6.0)
    codes: np.ndarray = np.searchsorted(_GRID, q).astype(np.uint8)
    signs: np.ndarray = np.signbit(m).astype(np.uint8) << 3
    out: np.ndarray = codes | signs
    return out


#: What llm-compressor writes for ``mxfp4-pack-quantized`` linears.
CT_MXFP4_CONFIG: dict[str, Any] = {
    "quant_method": "compressed-tensors",
    "format": "mxfp4-pack-quantized",
    "config_groups": {
        "group_0": {
            "format": "mxfp4-pack-quantized",
            "targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "float", "group_size": 32, "strategy": "group"},
        }
    },
}
#: What gpt-oss writes (its attention, router, embeddings and head stay bfloat16).
GPT_OSS_CONFIG: dict[str, Any] = {"quant_method": "mxfp4", "modules_to_not_convert": []}
#: The modules OpenAI's gpt-oss checkpoints leave unquantized (only the experts are MXFP4),
#: for a whole-model twin's ``modules_to_not_convert``.
GPT_OSS_NOT_CONVERTED = [
    "model.layers.*.self_attn",
    "model.layers.*.mlp.router",
    "model.embed_tokens",
    "lm_head",
]


#: Smallest logits cosine similarity promised for a model loaded from MXFP4
#: weights (E2M1 keeps one mantissa bit per element, one power-of-two per 32).
MIN_LOGITS_COSINE = 0.90


def encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, RawTensor]
) -> float:
    """The format's ``flexq_encode``: ``weights`` and ``others`` in ``directory``, in
    llm-compressor's layout (it stores nn.Linear's [out, in] weights as they are).

    :return: :data:`MIN_LOGITS_COSINE`, the logits cosine the checkpoint promises.
    """
    save_mxfp4_checkpoint(directory, weights, layout="compressed-tensors", others=others)
    return MIN_LOGITS_COSINE


def save_mxfp4_checkpoint(
    directory: str | os.PathLike[str],
    tensors: Mapping[str, npt.ArrayLike],
    *,
    layout: Layout = "compressed-tensors",
    others: Mapping[str, RawTensor] | None = None,
) -> Path:
    """Quantize ``tensors`` (as :func:`quantize` takes them) and write them with ``others``
    and the producer's config.json (llm-compressor's or gpt-oss') into ``directory``."""
    qc = CT_MXFP4_CONFIG if layout == "compressed-tensors" else GPT_OSS_CONFIG
    return save_checkpoint(
        directory,
        {**(others or {}), **quantize(tensors, layout=layout)},
        config={"quantization_config": qc},
    )
