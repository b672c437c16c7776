"""flexq demo: the README's main job."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import flexq
from flexq.cli import demo, main
from flexq.formatkit import Format

from .conftest import example_module


def test_demo_prints_a_row_per_installed_format_and_succeeds() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "flexq.cli", "demo"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    encoders = [
        n
        for n in flexq.plugin.manager.registry.active()
        if flexq.plugin.manager.registry.implements(n, "flexq_encode")
    ]
    assert encoders
    for name in encoders:
        row = next(line for line in proc.stdout.splitlines() if f" {name} " in line)
        assert row.split("│")[-2].strip() == "ok"
    assert proc.stderr == ""  # not even Paddle's import-time ccache warning


def test_the_aoa_statements_build_the_paddle_layout_from_hf_weights(tmp_path: object) -> None:
    linear, other = demo.hf_weights()
    rows = demo.run()
    assert all(r.logits_cosine > 0.5 for r in rows)
    params = demo.paddle_params()
    ckpt = flexq.save_checkpoint(
        tmp_path / "plain",  # type: ignore[operator]
        {k: flexq.RawTensor.of(v) for k, v in {**linear, **other}.items()},
    )
    flexq.load_state_dict(params, ckpt, aoa_config={"aoa_statements": demo.aoa_statements()})
    hf = "model.layers.1"
    q, k, v = (linear[f"{hf}.self_attn.{n}_proj.weight"].T for n in "qkv")
    d = demo.HEAD_DIM
    per_head = [
        np.concatenate([w[:, h * d : (h + 1) * d] for w in (q, k, v)], 1) for h in range(demo.HEADS)
    ]
    np.testing.assert_array_equal(
        params["layers.1.qkv.weight"].numpy(), np.concatenate(per_head, 1)
    )
    gate, up = (linear[f"{hf}.mlp.{n}_proj.weight"].T for n in ("gate", "up"))
    np.testing.assert_array_equal(
        params["layers.1.gate_up.weight"].numpy(), np.concatenate([gate, up], 1)
    )
    np.testing.assert_array_equal(params["lm_head.weight"].numpy(), other["lm_head.weight"].T)


def test_a_format_drifting_past_its_tolerance_fails_the_demo(
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = example_module()

    def encode(
        directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, flexq.RawTensor]
    ) -> float:
        module.encode(directory, weights, others)
        return 1.5  # no quantized model reaches this cosine

    overpromising = Format(
        "overpromising",
        "int8row with an impossible tolerance.",
        methods=module.plugin.methods,
        analyze=module.analyze,
        plan=module.local_plan,
        decode=module.decode,
        encode=encode,
    )
    flexq.register_format(overpromising)
    try:
        assert main(["demo"]) == 1
    finally:
        flexq.unregister_format("overpromising")
    captured = capsys.readouterr()
    assert "DRIFT" in captured.out
    assert captured.err.strip() == "flexq: logits drifted beyond tolerance for overpromising"
