"""The shared oracle helpers of format tests: one rounding, bit equality, bench scripts.

For format authors' tests (and flexq's own): a pure-numpy reference decoder gives
float32; :func:`round_to` rounds it once to the output dtype in the core's result
convention, :func:`same_bits` compares bits (NaN payloads aside), and
:func:`load_script` imports a bench script by path so a test can run it tiny, and
:func:`helpers` hands a conftest's oracle functions to test modules as one fixture.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Float32 ``x`` rounded once to ``dtype`` (a Paddle dtype name), as a load returns
    it on the CPU path: bfloat16 as uint16 bits. The rounding is ml_dtypes' (install
    it with your tests), not the core's, so the oracle does not share the code it checks."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "bfloat16":
        import ml_dtypes

        return x.astype(ml_dtypes.bfloat16).view(np.uint16)
    return x.astype(dtype)


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Assert ``got`` and ``want`` have the same shape, dtype and bits, except that any
    NaN equals any NaN (formats do not specify NaN payloads). -0.0 is not +0.0."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    width = np.dtype(f"u{got.dtype.itemsize}")
    nan = np.isnan(want) if want.dtype.kind == "f" else np.zeros(want.shape, bool)
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(
        np.ascontiguousarray(got).view(width)[~nan], np.ascontiguousarray(want).view(width)[~nan]
    )


def same_bfloat16(got_bits: np.ndarray, want_bits: np.ndarray) -> None:
    """:func:`same_bits` for bfloat16 given as uint16 bits: every value bit for bit, NaN
    positions alike whatever their payload (Paddle's float32 -> bfloat16 cast writes every
    NaN as 0x7FFF, a numpy rounding keeps the sign: 0x7FC0/0xFFC0)."""
    import ml_dtypes

    def widened(bits: np.ndarray) -> np.ndarray:  # exact: bfloat16 is float32's top half
        wide: np.ndarray = np.asarray(bits, np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
        return wide

    same_bits(widened(got_bits), widened(want_bits))


def fixture_of(value: Any, name: str) -> Any:
    """A session-scoped pytest fixture that returns ``value`` (a conftest's oracle
    function or data maker: ``ref_decode = fixture_of(reference_decode, "ref_decode")``;
    pytest finds it under ``name``)."""
    import pytest

    def fixture() -> Any:
        return value

    return pytest.fixture(scope="session", name=name)(fixture)


def write_checkpoint(
    directory: str | Path,
    tensors: Mapping[str, Any],
    config: Mapping[str, Any] | None = None,
    **options: Any,
) -> Path:
    """:func:`flexq.save_checkpoint` with the config as the third argument: what a
    conftest's ``build`` fixture hands its tests (``build = fixture_of(write_checkpoint,
    "build")``)."""
    from flexq.io.writer import save_checkpoint

    return save_checkpoint(directory, tensors, config=config, **options)


def load_script(path: str | Path) -> ModuleType:
    """Import the Python file ``path`` (a bench script beside a package) as a module."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def helpers(*objects: Any) -> SimpleNamespace:
    """``objects`` (functions, classes) by their ``__name__``, as one namespace: what a
    conftest's ``oracle`` fixture returns, since test modules cannot import conftest."""
    return SimpleNamespace(**{obj.__name__: obj for obj in objects})
