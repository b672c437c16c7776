"""Fixtures for the nvfp4 tests: the ml_dtypes reference decoder and tiny checkpoint builders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import flexq
from flexq.testing import fixture_of, write_checkpoint

RefDecode = Callable[[str, np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]
Build = Callable[..., Path]

CT = "compressed-tensors"
MO = "modelopt"
AR = "auto-round"
#: suffixes of (codes, block scale, global scale) per producer.
NAMES = {
    CT: (".weight_packed", ".weight_scale", ".weight_global_scale"),
    MO: (".weight", ".weight_scale", ".weight_scale_2"),
    AR: (".weight_packed", ".weight_scale", ".weight_global_scale"),
}


def reference_decode(
    producer: str, packed: np.ndarray, scales: np.ndarray, glob: np.ndarray, n: int
) -> np.ndarray:
    """The oracle: NVFP4 bytes [..., n/2] + E4M3 bytes [..., ceil(n/16)] + global -> float32.

    Independent of flexq_nvfp4: nibbles split with shifts, elements decoded by
    ml_dtypes' float4_e2m1fn and scales by its float8_e4m3fn, the effective
    scale formed as each producer does (``s / g`` or ``s * g``, float32), then
    multiplied; auto-round multiplies the elements by ``1 / g`` (0 for g = 0) first.
    ModelOpt's own table decodes code 8 as +0.
    """
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1)
    codes = codes.reshape(*packed.shape[:-1], 2 * packed.shape[-1])[..., :n]
    elems = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    if producer == MO:
        elems[codes == 8] = 0.0
    s = np.asarray(scales, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    g = np.float32(np.asarray(glob, dtype=np.float32).reshape(()))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if producer == AR:
            elems = elems * (np.float32(0) if g == 0 else np.float32(1) / g)
            eff = s
        else:
            eff = s / g if producer == CT else s * g
        out: np.ndarray = elems * np.repeat(eff, 16, axis=-1)[..., :n]
    return out


#: The reference decoder (session-scoped so hypothesis tests can use it).
ref_decode = fixture_of(reference_decode, "ref_decode")


def random_nv(
    rng: np.random.Generator, lead: tuple[int, ...], n: int, *, specials: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random codes [..., n/2], E4M3 scales [..., ceil(n/16)] and a float32 global [1].

    Scales are any finite positive E4M3 byte (subnormals 0x01..0x07 included);
    with ``specials`` a few are 0x00 (zero), 0x7E (448) and 0x7F (NaN).
    """
    packed = rng.integers(0, 256, (*lead, n // 2), dtype=np.uint8)
    scales = rng.integers(0x01, 0x7F, (*lead, -(-n // 16)), dtype=np.uint8)
    if specials and scales.size:
        flat = scales.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = [0x00, 0x7E, 0x7F]
    glob = np.array([rng.uniform(0.5, 3000.0)], dtype=np.float32)
    return packed, scales, glob


random_nv_data = fixture_of(random_nv, "random_nv_data")


def nv_tensors(
    producer: str,
    base: str,
    packed: np.ndarray,
    scales: np.ndarray,
    glob: np.ndarray,
) -> dict[str, flexq.RawTensor]:
    """The three checkpoint tensors of one NVFP4 weight in ``producer``'s names."""
    codes, scale, global_ = NAMES[producer]
    g = np.asarray(glob, np.float32).reshape(() if producer == MO else (1,))
    return {
        base + codes: flexq.RawTensor("U8", packed),
        base + scale: flexq.RawTensor("F8_E4M3", scales),
        base + global_: flexq.RawTensor("F32", g),
    }


nv = fixture_of(nv_tensors, "nv")
#: Writes tensors (and a config.json when given: the third argument) as a checkpoint.
build = fixture_of(write_checkpoint, "build")


def bf16_config(method: str, **fields: Any) -> dict[str, Any]:
    """A bfloat16 model's config.json with ``quantization_config`` of ``method``."""
    return {"torch_dtype": "bfloat16", "quantization_config": {"quant_method": method, **fields}}


CT_GROUP = {"num_bits": 4, "type": "float", "group_size": 16, "strategy": "tensor_group"}
CT_CONFIG = bf16_config(
    "compressed-tensors",
    format="nvfp4-pack-quantized",
    config_groups={
        "group_0": {"format": "nvfp4-pack-quantized", "targets": ["Linear"], "weights": CT_GROUP}
    },
    ignore=["lm_head", "re:.*mlp\\.gate$"],
)
MO_CONFIG = bf16_config(
    "modelopt", quant_algo="NVFP4", ignore=["lm_head", "model.layers.1.self_attn*"]
)
#: What auto-round 0.15.1 writes for scheme="NVFP4" in its own format (format="auto_round").
AR_CONFIG = bf16_config(
    "auto-round",
    packing_format="auto_round:llm_compressor",
    data_type="nv_fp",
    bits=4,
    group_size=16,
    sym=True,
    act_bits=4,
    act_data_type="nv_fp4_with_static_gs",
    act_group_size=16,
)

CONFIGS = {CT: CT_CONFIG, MO: MO_CONFIG, AR: AR_CONFIG}


@pytest.fixture(scope="session")
def configs() -> dict[str, dict[str, Any]]:
    return CONFIGS
