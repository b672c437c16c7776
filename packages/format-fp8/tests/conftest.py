"""The independent oracle for the fp8 tests: a numpy reference decoder built on ml_dtypes.

Nothing here uses flexq_fp8's own tables or block logic: element and scale
values come from ml_dtypes (float8_e4m3fn, bfloat16, float8_e8m0fnu), block
indices from plain integer division with the block size the test chose.
Exposed through fixtures because test modules cannot import each other; the
pure functions are session-scoped so hypothesis tests can use them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np
import pytest

from flexq import RawTensor
from flexq.testing import fixture_of

#: (codes uint8, stored scale, block per dim) -> float32 values.
Reference = Callable[[np.ndarray, RawTensor, Sequence[int]], np.ndarray]
#: (float32 values, output dtype name) -> array as flexq returns it (bf16 as uint16 bits).
Rounder = Callable[[np.ndarray, str], np.ndarray]
#: (rng, shape) -> uint8 codes covering every byte value, NaN codes included.
CodeMaker = Callable[[np.random.Generator, Sequence[int]], np.ndarray]
#: (rng, grid shape, safetensors dtype) -> a stored scale tensor.
ScaleMaker = Callable[[np.random.Generator, Sequence[int], str], RawTensor]


def decode_scale(scale: RawTensor) -> np.ndarray:
    """Stored scale -> float32 through ml_dtypes (U8 and F8_E8M0 are E8M0 exponents)."""
    data = scale.data
    if scale.dtype == "BF16":
        return np.asarray(data.view(ml_dtypes.bfloat16), dtype=np.float32)
    if scale.dtype in ("U8", "F8_E8M0"):
        return np.asarray(data.view(ml_dtypes.float8_e8m0fnu), dtype=np.float32)
    return data.astype(np.float32)


def reference_dequant(codes: np.ndarray, scale: RawTensor, block: Sequence[int]) -> np.ndarray:
    """W = e4m3(codes) * scale[i // b0, j // b1, ...] in float32."""
    values = np.asarray(codes.view(ml_dtypes.float8_e4m3fn), dtype=np.float32)
    grid = [-(-n // b) for n, b in zip(codes.shape, block, strict=True)]
    s = decode_scale(scale).reshape(grid)
    index = np.ix_(*[np.arange(n) // b for n, b in zip(codes.shape, block, strict=True)])
    return np.asarray(values * s[index], dtype=np.float32)


def round_output(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round float32 once to ``dtype`` as flexq returns it (bfloat16 as uint16 bits)."""
    if dtype == "bfloat16":
        return values.astype(ml_dtypes.bfloat16).view(np.uint16)
    return values.astype(np.dtype(dtype))


def random_codes(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    codes = rng.integers(0, 256, size=tuple(shape), dtype=np.uint8)
    flat = codes.reshape(-1)
    flat[: min(flat.size, 256)] = np.arange(min(flat.size, 256), dtype=np.uint8)
    rng.shuffle(flat)
    return codes


def random_scale(rng: np.random.Generator, grid: Sequence[int], dtype: str) -> RawTensor:
    shape = tuple(grid)
    if dtype in ("U8", "F8_E8M0"):
        return RawTensor(dtype, rng.integers(100, 140, size=shape, dtype=np.uint8))
    values = rng.uniform(2.0**-12, 2.0**-4, size=shape).astype(np.float32)
    if dtype == "BF16":
        return RawTensor("BF16", values.astype(ml_dtypes.bfloat16).view(np.uint16))
    if dtype == "F16":
        return RawTensor("F16", values.astype(np.float16))
    return RawTensor("F32", values)


# The oracle and the data makers as session fixtures (hypothesis tests use them too).
reference = fixture_of(reference_dequant, "reference")
rounder = fixture_of(round_output, "rounder")
make_codes = fixture_of(random_codes, "make_codes")
make_scale = fixture_of(random_scale, "make_scale")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240601)
