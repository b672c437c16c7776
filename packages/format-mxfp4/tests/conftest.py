"""Fixtures for the mxfp4 tests: the ml_dtypes reference decoder and tiny checkpoint builders."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import flexq
from flexq.testing import fixture_of, write_checkpoint
from flexq_mxfp4.encode import CT_MXFP4_CONFIG

RefDecode = Callable[[np.ndarray, np.ndarray, int], np.ndarray]
Build = Callable[..., Path]


def reference_decode(packed: np.ndarray, scales: np.ndarray, n: int) -> np.ndarray:
    """The oracle: MXFP4 bytes [..., nbytes] + E8M0 bytes [..., nblk] -> float32 [..., n].

    Independent of flexq_mxfp4: nibbles are split with shifts, decoded by
    ml_dtypes' float4_e2m1fn, scales by its float8_e8m0fnu, multiplied in float32.
    """
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1)
    codes = codes.reshape(*packed.shape[:-1], 2 * packed.shape[-1])[..., :n]
    elems = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    scale = np.asarray(scales, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    with np.errstate(over="ignore"):
        out: np.ndarray = elems * np.repeat(scale, 32, axis=-1)[..., :n]
    return out


#: The reference decoder (session-scoped so hypothesis tests can use it).
ref_decode = fixture_of(reference_decode, "ref_decode")


def random_mx(
    rng: np.random.Generator, lead: tuple[int, ...], n: int, *, specials: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Random packed bytes [..., n/2] and scales [..., ceil(n/32)] around 2^0.

    With ``specials`` a few scales are 0x00 (2^-127), 0xFF (NaN) and 0xFE (overflow).
    """
    packed = rng.integers(0, 256, (*lead, n // 2), dtype=np.uint8)
    scales = rng.integers(110, 145, (*lead, -(-n // 32)), dtype=np.uint8)
    if specials and scales.size:
        flat = scales.reshape(-1)
        pick = rng.integers(0, flat.size, 3)
        flat[pick] = [0x00, 0xFF, 0xFE]
    return packed, scales


random_mx_data = fixture_of(random_mx, "random_mx_data")
#: Writes tensors (and a config.json when given: the third argument) as a checkpoint.
build = fixture_of(write_checkpoint, "build")


GPT_OSS_CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    },
}

#: llm-compressor's config (the encoder's own) with its head left unquantized.
CT_CONFIG = {
    "torch_dtype": "bfloat16",
    "quantization_config": {**CT_MXFP4_CONFIG, "ignore": ["lm_head"]},
}


@pytest.fixture(scope="session")
def mx() -> SimpleNamespace:
    """The builder, the random data, the oracle and both producers' configs in one, for
    tests that need them all: ``build``, ``random``, ``ref_decode``, ``gpt_oss``, ``ct``."""
    return SimpleNamespace(
        build=write_checkpoint,
        random=random_mx,
        ref_decode=reference_decode,
        gpt_oss=GPT_OSS_CONFIG,
        ct=CT_CONFIG,
    )


@pytest.fixture(params=[("U8", "U8"), ("F4", "F8_E8M0")], ids=["U8-U8", "F4-F8_E8M0"])
def stored(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The packed codes' and the scales' stored dtypes: raw bytes, as gpt-oss and
    llm-compressor write them, or safetensors' own F4 and F8_E8M0."""
    param: tuple[str, str] = request.param
    return param


@pytest.fixture
def gpt_oss_config() -> dict[str, Any]:
    return GPT_OSS_CONFIG


@pytest.fixture
def ct_config() -> dict[str, Any]:
    return CT_CONFIG


class FakeFp8:
    """A stand-in FP8 format claiming ``X.weight`` (F8_E4M3) + ``X.weight_scale``.

    Lets hybrid-checkpoint tests compose strictly without depending on the real
    fp8 package; the values it produces are not checked.
    """

    FORMAT_NAME = "fake-fp8"

    @flexq.hookimpl
    def flexq_logical_metadata(
        self, checkpoint: flexq.Checkpoint
    ) -> dict[str, flexq.LogicalTensor]:
        return {
            k: flexq.LogicalTensor(i.shape, "bfloat16")
            for k, i in checkpoint.tensors.items()
            if i.dtype == "F8_E4M3" and k + "_scale" in checkpoint.tensors
        }

    @flexq.hookimpl
    def flexq_source_keys(self, logical_key: str) -> list[str]:
        return [logical_key, logical_key + "_scale"]


@pytest.fixture
def fake_fp8() -> Iterator[str]:
    name = flexq.register_format(FakeFp8())
    try:
        yield name
    finally:
        flexq.unregister_format(name)
