"""``engine="native"`` runs the declared checks before Paddle's loader writes anything.

The catalogue's NVFP4 and GPTQ cases (tests/reliability/catalogue.py) damage the
second linear; through Paddle's ``load_transform`` loader (the real one, or the
stand-in of :mod:`tests.native.upstream`) the load fails with the same error and
every target is left bit-identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import flexq

from ..reliability.catalogue import BY_ID, Case
from ..test_reliability import assert_names, bits, build, escalated, make_targets

if TYPE_CHECKING:
    from .conftest import Loader

CASES = [
    BY_ID[i] for i in ("nvfp4-scale-nan", "nvfp4-global-scale-zero", "gptq-g-idx-out-of-range")
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_native_engine_fails_before_the_first_write(
    case: Case, tmp_path: Path, paddle_load: Loader
) -> None:
    ckpt = build(case, tmp_path)
    targets = make_targets(ckpt)
    assert case.damage is not None
    case.damage(ckpt)
    before = bits(targets)
    with escalated(case), pytest.raises(case.error) as raised:
        flexq.load_state_dict(targets, ckpt, engine="native")
    assert_names(str(raised.value), case)
    assert bits(targets) == before
