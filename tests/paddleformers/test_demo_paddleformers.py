"""``flexq demo`` with PaddleFormers installed: a real PaddleFormers Llama in every format."""

from __future__ import annotations

import pytest

pytest.importorskip("paddleformers")

from flexq.cli import demo, demo_paddleformers
from flexq.cli.main import main
from flexq.plugin.manager import registry


def test_the_demo_loads_a_paddleformers_llama_in_every_format_within_tolerance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[object] = []
    real = demo_paddleformers.run

    def spy(workdir: object = None, keep: object = None) -> list[demo.DemoRow]:
        assert keep is None  # `flexq demo` without --keep
        rows = real()
        ran.append(rows)
        return rows

    monkeypatch.setattr(demo_paddleformers, "run", spy)
    assert main(["demo"]) == 0
    assert len(ran) == 1  # the PaddleFormers model, not the demo's own mini model
    (rows,) = ran
    assert isinstance(rows, list)
    assert [r.format for r in rows] == registry.encoders()
    for r in rows:
        assert r.ok, (r.format, r.logits_cosine, r.tolerance)
        assert r.max_weight_error > 0  # quantized, so not the unquantized weights
