"""AOA statements model libraries ship: PaddleFormers' rules must pass flexq's checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import paddle
import pytest

import flexq

if TYPE_CHECKING:
    from pathlib import Path


def test_a_statement_with_no_source_is_accepted(scaled_ckpt: Path, scaled_format: object) -> None:
    """PaddleFormers' gpt-oss rules start with ``_ -> model.rotary_emb.inv_freq``: AOA's
    "this buffer has no source" (it is computed, not loaded)."""
    a = paddle.zeros([3, 4])
    statements = ["_ -> model.rotary_emb.inv_freq", "a -> a"]
    flexq.load_state_dict(
        {"a": a}, scaled_ckpt, formats=["scaled"], aoa_config={"aoa_statements": statements}
    )
    np.testing.assert_array_equal(a.numpy(), np.arange(-6, 6, dtype=np.float32).reshape(3, 4) / 2)


def test_a_misspelled_source_is_still_an_error(scaled_ckpt: Path, scaled_format: object) -> None:
    with pytest.raises(flexq.TargetError, match="reads 'b'"):
        flexq.load_state_dict(
            {"a": paddle.zeros([3, 4])},
            scaled_ckpt,
            formats=["scaled"],
            aoa_config={"aoa_statements": ["b -> a"]},
        )
