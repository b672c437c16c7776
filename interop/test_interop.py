"""flexq against the producers' own dequantizers, on checkpoints the producers wrote.

For every scheme of :data:`interop.schemes.SCHEMES` whose flexq format is
installed and working (chosen at collection time), flexq's logical tensors must
be bit-identical to the producer's own float32 dequantization. For every scheme,
flexq without that format (not installed, or left out / disabled here) must
refuse the checkpoint loudly: never load it silently as something else.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import flexq

from .producers.base import LINEARS, f32, read_safetensors
from .schemes import SCHEMES, Product

ACTIVE = {info.name for info in flexq.list_formats() if info.error is None}
DECODED = [s.name for s in SCHEMES if s.fmt in ACTIVE]

decoded = pytest.mark.parametrize("product", DECODED, indirect=True)
every_scheme = pytest.mark.parametrize("product", [s.name for s in SCHEMES], indirect=True)


def assert_bits_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Same shape and the same float32 bit patterns (NaNs included)."""
    assert got.dtype == np.float32, f"{what}: dtype {got.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    diff = got.view(np.uint32) != want.astype(np.float32).view(np.uint32)
    if diff.any():
        idx = tuple(int(i[0]) for i in np.nonzero(diff))
        worst = float(np.nanmax(np.abs(got.astype(np.float64) - want)))
        raise AssertionError(
            f"{what}: {int(diff.sum())} of {diff.size} elements differ; first at {idx}: "
            f"flexq {got[idx]!r} vs producer {want[idx]!r}; max |diff| {worst:g}"
        )


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """``x`` rounded once to bfloat16 (ml_dtypes), as uint16 bits."""
    return x.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def snapshot(path: Path) -> dict[str, tuple[int, int]]:
    """File name -> (size, mtime_ns) of everything under ``path``."""
    return {
        str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


@every_scheme
def test_the_oracle_is_near_the_original_weights(product: Product, base_model: Path) -> None:
    """The producer's own dequantization is a quantization of the base model's weights."""
    own = read_safetensors(base_model)
    assert len(product.built.reference) == len(LINEARS)
    for key, ref in product.built.reference.items():
        w = f32(own[key])
        err = float(np.linalg.norm(ref - w) / np.linalg.norm(w))
        assert err < product.scheme.tolerance, f"{key}: relative error {err:.3f}"


@decoded
def test_float32_is_bit_identical_to_the_producer(product: Product) -> None:
    ct = flexq.compose(product.built.path)
    missing = sorted(set(product.built.reference) - set(ct.entries))
    assert not missing, f"logical keys not in flexq's view: {missing}"
    for key, want in product.built.reference.items():
        assert ct.entries[key].shape == want.shape, key
        assert_bits_equal(ct.load(key, "float32"), want, key)


@decoded
def test_bfloat16_is_the_reference_rounded_once(product: Product) -> None:
    ct = flexq.compose(product.built.path)
    for key, want in product.built.reference.items():
        got = ct.load(key, "bfloat16").view(np.uint16)
        ref = bfloat16_bits(want)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got.view(ml_dtypes.bfloat16)), nan), key
        bad = (got != ref) & ~nan
        assert not bad.any(), f"{key}: {int(bad.sum())} bfloat16 elements differ"


@decoded
def test_unquantized_tensors_pass_through(product: Product) -> None:
    ct = flexq.compose(product.built.path)
    assert product.built.passthrough, "the producer left norms, embeddings and lm_head unquantized"
    for key, want in product.built.passthrough.items():
        assert key in ct.entries, key
        assert ct.entries[key].is_passthrough, f"{key} claimed by {ct.entries[key].owner}"
        assert_bits_equal(ct.load(key, "float32"), want, key)


@decoded
def test_loading_leaves_the_checkpoint_unchanged(product: Product) -> None:
    before = snapshot(product.built.path)
    ct = flexq.compose(product.built.path)
    for key in ct.entries:
        ct.load(key, "float32")
    assert snapshot(product.built.path) == before


@every_scheme
def test_compose_without_its_format_refuses_naming_the_method(product: Product) -> None:
    others = sorted(ACTIVE - {product.scheme.fmt})
    with pytest.raises(flexq.FlexqError) as info:
        flexq.compose(product.built.path, formats=others)
    message = str(info.value)
    assert product.scheme.method in message, message


@every_scheme
def test_inspect_without_its_format_refuses_in_one_line(product: Product) -> None:
    # FLEXQ_DISABLED_FORMATS keeps the entry point from loading: as if not installed.
    env = {**os.environ, "FLEXQ_DISABLED_FORMATS": product.scheme.fmt}
    proc = subprocess.run(
        [sys.executable, "-m", "flexq.cli", "inspect", str(product.built.path)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert proc.stderr.strip(), "inspect printed nothing on stderr"
    assert "Traceback" not in proc.stderr
