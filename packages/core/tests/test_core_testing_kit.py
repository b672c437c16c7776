"""flexq.testing's oracle helpers: what they accept and what they refuse."""

from __future__ import annotations

import numpy as np
import pytest

from flexq.testing import same_bfloat16
from flexq.testing.strategies import examples


def test_same_bfloat16_ignores_nan_payloads_only() -> None:
    want = np.array([0x3F80, 0xFFC0, 0x8000, 0x7F80], np.uint16)  # 1, -NaN, -0, +inf
    same_bfloat16(np.array([0x3F80, 0x7FFF, 0x8000, 0x7F80], np.uint16), want)
    with pytest.raises(AssertionError):
        same_bfloat16(np.array([0x3F80, 0x7FFF, 0x0000, 0x7F80], np.uint16), want)  # +0
    with pytest.raises(AssertionError):
        same_bfloat16(np.array([0x3F80, 0x3F80, 0x8000, 0x7F80], np.uint16), want)  # no NaN


def test_examples_sets_the_count_and_no_deadline() -> None:
    profile = examples(7)
    assert profile.max_examples == 7
    assert profile.deadline is None
