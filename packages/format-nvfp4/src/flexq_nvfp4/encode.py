"""The NVFP4 encoder: float arrays -> NVFP4 checkpoint tensors (compressed-tensors or ModelOpt).

For round-trip tests, demos and the format's ``flexq_encode``
(``flexq_nvfp4.plugin``). It follows each producer's recipe, in float32 like they do:

- compressed-tensors / llm-compressor (``generate_gparam``, ``calculate_qparams``):
  ``g = 448 * 6 / amax(W)`` (amax at least float32's smallest normal; a non-finite
  result becomes 1); block scale ``s = E4M3(g * amax(block) / 6)`` (clamped to
  +-448, round to nearest even; a zero becomes E4M3's eps 0.125); codes
  ``E2M1(W / (s / g))``;
- ModelOpt (``NVFP4QTensor``): ``g2 = amax(W) / (6 * 448)``; block scale
  ``s = E4M3(clamp(amax(block) / (6 * g2), 2^-9, 448))`` (a zero or NaN ratio
  becomes 1); codes ``E2M1(W / (s * g2))``.

E2M1 rounding is to the nearest value, ties to even, saturating at +-6; element
2b goes to the low nibble of byte b. A partial last block is quantized as if
padded with zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from flexq import RawTensor
from flexq.formatkit import E4M3_TO_FLOAT32
from flexq_nvfp4.layout import (
    BLOCK,
    CT_GLOBAL,
    CT_PACKED,
    CT_SCALE,
    MO_GLOBAL,
    MO_SCALE,
    MO_WEIGHT,
    Layout,
    n_blocks,
)

E4M3_MAX = 448.0
E2M1_MAX = 6.0
#: compressed-tensors replaces a zero block scale by the E4M3 eps (2^-3).
_CT_ZERO_SCALE = 0.125
_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])

#: What llm-compressor 0.14.0.1 (compressed-tensors 0.19.0) writes for ``NVFP4A16``.
CT_NVFP4_CONFIG: dict[str, Any] = {
    "config_groups": {
        "group_0": {
            "format": "nvfp4-pack-quantized",
            "input_activations": None,
            "output_activations": None,
            "targets": ["Linear"],
            "weights": {
                "actorder": None,
                "block_structure": None,
                "dynamic": False,
                "group_size": 16,
                "num_bits": 4,
                "observer": "memoryless_minmax",
                "observer_kwargs": {},
                "scale_dtype": "torch.float8_e4m3fn",
                "strategy": "tensor_group",
                "symmetric": True,
                "type": "float",
                "zp_dtype": None,
            },
        }
    },
    "format": "nvfp4-pack-quantized",
    "global_compression_ratio": None,
    "ignore": ["lm_head"],
    "kv_cache_scheme": None,
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
    "sparsity_config": {},
    "transform_config": {},
    "version": "0.19.0",
}
#: What ModelOpt writes into config.json for an NVFP4 export (beside hf_quant_config.json).
MODELOPT_NVFP4_CONFIG: dict[str, Any] = {
    "quant_method": "modelopt",
    "quant_algo": "NVFP4",
    "config_groups": {
        "group_0": {
            "input_activations": {
                "dynamic": False,
                "num_bits": 4,
                "type": "float",
                "group_size": 16,
            },
            "weights": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16},
            "targets": ["Linear"],
        }
    },
    "ignore": ["lm_head"],
}


def quantize(
    tensors: Mapping[str, npt.ArrayLike], *, layout: Layout = "compressed-tensors"
) -> dict[str, RawTensor]:
    """Quantize float tensors ``X.weight`` [..., n] (n even) to NVFP4 checkpoint tensors.

    :param layout: ``"compressed-tensors"`` writes ``X.weight_packed`` U8 [..., n/2],
        ``X.weight_scale`` F8_E4M3 [..., ceil(n/16)], ``X.weight_global_scale`` F32 [1];
        ``"modelopt"`` writes ``X.weight`` U8, ``X.weight_scale`` F8_E4M3 and
        ``X.weight_scale_2`` F32 (0-d).
    :raises ValueError: on an unknown layout, a key not ending in ``.weight``, or an odd n.
    """
    if layout not in ("compressed-tensors", "modelopt"):
        raise ValueError(f"unknown NVFP4 layout {layout!r}")
    out: dict[str, RawTensor] = {}
    for key, value in tensors.items():
        x = np.asarray(value, dtype=np.float32)
        if not key.endswith(MO_WEIGHT) or x.ndim < 1 or x.shape[-1] % 2:
            raise ValueError(
                f"{key!r}: NVFP4 needs a key X.weight of shape [..., 2k], got {x.shape}"
            )
        base = key.removesuffix(MO_WEIGHT)
        packed, scales, glob = quantize_array(x, layout)
        if layout == "compressed-tensors":
            out[base + CT_PACKED] = RawTensor("U8", packed)
            out[base + CT_SCALE] = RawTensor("F8_E4M3", scales)
            out[base + CT_GLOBAL] = RawTensor("F32", glob.reshape(1))
        else:
            out[base + MO_WEIGHT] = RawTensor("U8", packed)
            out[base + MO_SCALE] = RawTensor("F8_E4M3", scales)
            out[base + MO_GLOBAL] = RawTensor("F32", glob.reshape(()))
    return out


def quantize_array(
    x: npt.ArrayLike, layout: Layout = "compressed-tensors"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantize ``x`` [..., n] (n even) with ``layout``'s recipe.

    :return: codes U8 [..., n/2], E4M3 bytes [..., ceil(n/16)], the float32 global scale.
    """
    x = np.asarray(x, dtype=np.float32)
    n, lead = x.shape[-1], x.shape[:-1]
    nblk = n_blocks(n)
    blocks = np.zeros((*lead, nblk * BLOCK), np.float32)
    blocks[..., :n] = x
    blocks = blocks.reshape(*lead, nblk, BLOCK)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        amax = np.float32(np.max(np.abs(x))) if x.size else np.float32(0)
        block_amax = np.max(np.abs(blocks), axis=-1) if blocks.size else np.zeros((*lead, nblk))
        block_amax = block_amax.astype(np.float32)
        if layout == "compressed-tensors":
            tiny = np.finfo(np.float32).tiny
            g = np.float32(E4M3_MAX * E2M1_MAX) / np.maximum(amax, np.float32(tiny))
            g = np.float32(g) if np.isfinite(g) else np.float32(1.0)
            raw = g * (block_amax / np.float32(E2M1_MAX))
            codes = e4m3_codes(np.clip(raw, -E4M3_MAX, E4M3_MAX))
            codes = np.where(codes == 0, encode_e4m3_value(_CT_ZERO_SCALE), codes).astype(np.uint8)
            eff = _e4m3_decode(codes) / g
        else:
            g = np.float32(amax / np.float32(E2M1_MAX * E4M3_MAX))
            raw = block_amax / (np.float32(E2M1_MAX) * g)
            raw = np.where((raw == 0) | np.isnan(raw), np.float32(1.0), raw)
            codes = e4m3_codes(np.clip(raw, 2.0**-9, E4M3_MAX))
            eff = _e4m3_decode(codes) * g
        m = blocks / eff[..., None].astype(np.float32)
    m = np.where(np.isfinite(m), m, np.where(np.isnan(m), 0.0, np.sign(m) * E2M1_MAX))
    nibbles = e2m1_codes(m).reshape(*lead, nblk * BLOCK)[..., :n]
    packed = (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)
    return packed, codes, np.asarray(g, dtype=np.float32)


def e2m1_codes(m: np.ndarray) -> np.ndarray:
    """Nearest E2M1 code (ties to even, saturating at 6) of each value of ``m``."""
    mag = np.abs(m)
    # Spacing is 0.5 below 2, 1 below 4, 2 above; np.rint rounds ties to even, and
    # on each stretch an even multiple of the spacing is an even code.
    q = np.where(
        mag < 2, np.rint(mag * 2) / 2, np.where(mag < 4, np.rint(mag), 2 * np.rint(mag / 2))
    )
    codes = np.searchsorted(_GRID, np.minimum(q, E2M1_MAX)).astype(np.uint8)
    out: np.ndarray = codes | (np.signbit(m).astype(np.uint8) << 3)
    return out


def e4m3_codes(v: npt.ArrayLike) -> np.ndarray:
    """E4M3FN bytes of float values already clamped to +-448 (round to nearest even)."""
    v = np.asarray(v, dtype=np.float64)
    mag = np.abs(v)
    # frexp: mag = f * 2^k, f in [0.5, 1), so the binary exponent is k - 1.
    _, k = np.frexp(mag)
    e = np.maximum(k - 1, -6)  # below 2^-6 the spacing is the subnormal 2^-9
    step = np.ldexp(1.0, e - 3)
    q = np.rint(mag / step) * step  # exact: a power-of-two step
    _, k2 = np.frexp(q)
    e2 = np.maximum(k2 - 1, -6)
    normal = q >= 2.0**-6
    mant = np.where(normal, q / np.ldexp(1.0, e2) - 1.0, q / 2.0**-9) * np.where(normal, 8, 1)
    exp_field = np.where(normal, e2 + 7, 0)
    codes = (exp_field.astype(np.int64) << 3) | np.rint(mant).astype(np.int64)
    codes = np.where(np.isnan(v), 0x7F, codes)
    out: np.ndarray = (codes | (np.signbit(v).astype(np.int64) << 7)).astype(np.uint8)
    return out


def encode_e4m3_value(x: float) -> np.uint8:
    return np.uint8(e4m3_codes(np.array(x))[()])


def _e4m3_decode(codes: np.ndarray) -> np.ndarray:
    out: np.ndarray = E4M3_TO_FLOAT32[codes]
    return out
