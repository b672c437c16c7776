"""Decoding into a bfloat16 target's memory gives the bits of rounding the float32 once.

A format may write a bfloat16 box straight into the target (``BoxSources.rounded_out``,
kit API 1.2) instead of filling the core's float32 scratch for the core to round. Every
installed format, over a checkpoint its own encoder wrote and for every box of a 2 x 2
split of each of its tensors: the bits in the target are
``float32_to_bfloat16_bits`` of the float32 decode of that box, whichever way they got
there; the float32 decode into a float32 target's memory gives its own bits; neither writes
outside the box's memory (``flexq.testing.decode_into_target``'s guard zones). The formats named in :data:`ROUNDS_ITSELF` must take the direct way for those
boxes (the core's rounding never runs for them): a change that quietly sent them back
through a float32 array would fail here, not only in a benchmark.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import flexq
from flexq import TargetSlice, composition
from flexq.formatkit import float32_to_bfloat16_bits
from flexq.numerics import rounding
from flexq.testing import decode_into_target

from .conftest import installed_formats

#: Formats whose encoder's layout rounds into a bfloat16 target itself -> which of the
#: boxes: "every" (the whole tensor and its row and column halves, as tensor-parallel
#: ranks take them) or "whole" (the whole tensor; a half goes through the core's rounding),
#: by the kit's banded rounding (``run_in_bands_rounded``, ``decode_in_row_bands``,
#: ``lookup_scaled``, the AWQ/Quark slot decoder) or, under one scale, ``lookup_rounded``.
ROUNDS_ITSELF = {
    "fp8": "every",
    "gptq": "every",
    "ct-int": "every",
    "nvfp4": "every",
    "int4-awq": "whole",
    "mxfp4": "whole",
    "bitsandbytes": "whole",
}


def _boxes(shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The whole tensor and each box of a split of its first two dims into halves."""
    boxes = [((0,) * len(shape), shape)]
    if len(shape) >= 2:
        halves = [[(0, n // 2), (n // 2, n - n // 2)] for n in shape[:2]]
        for (r0, nr), (c0, nc) in itertools.product(*halves):
            boxes.append(((r0, c0, *(0,) * (len(shape) - 2)), (nr, nc, *shape[2:])))
    return [b for b in boxes if 0 not in b[1]]


def test_a_bfloat16_box_is_the_float32_box_rounded_once(
    format_ckpt: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, path = format_ckpt
    ct = flexq.compose(path)
    rounded_by_core: list[tuple[int, ...]] = []
    real = rounding.round_numpy  # what flexq.composition imported

    def spy(x: np.ndarray, dtype: str, out: np.ndarray | None = None) -> np.ndarray:
        rounded_by_core.append(x.shape)
        return real(x, dtype, out)

    monkeypatch.setattr(composition, "round_numpy", spy)
    owned = [k for k, e in ct.entries.items() if e.owner == name]
    assert owned
    direct: dict[tuple[str, tuple[int, ...], bool], bool] = {}  # (key, offset, whole)
    for key in owned:
        shape = ct.entries[key].shape
        for offset, size in _boxes(shape):
            plan32 = ct.plan(key, TargetSlice(shape, size, offset, "float32"))
            whole32 = np.asarray(ct.decode(key, ct.read_sources(plan32), plan32, "float32"))
            # into float32 target memory too (guarded: no write outside the box's memory)
            into32 = decode_into_target(ct, key, ct.read_sources(plan32), plan32)
            np.testing.assert_array_equal(into32.view(np.uint32), whole32.view(np.uint32))
            want = float32_to_bfloat16_bits(whole32)
            plan16 = ct.plan(key, TargetSlice(shape, size, offset, "bfloat16"))
            before = len(rounded_by_core)
            into = decode_into_target(ct, key, ct.read_sources(plan16), plan16)
            np.testing.assert_array_equal(into, want, err_msg=f"{name} {key} {offset}+{size}")
            direct[key, offset, size == shape] = len(rounded_by_core) == before
    expected = ROUNDS_ITSELF.get(name)
    if expected is not None:
        looked_at = direct if expected == "every" else {k: v for k, v in direct.items() if k[2]}
        assert all(looked_at.values()), (name, looked_at)


def test_the_formats_that_round_themselves_are_among_those_tested() -> None:
    assert set(installed_formats()) >= set(ROUNDS_ITSELF)
