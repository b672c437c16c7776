"""``flexq verify --tp N --model CLASS``: PaddleFormers' own split of each weight (issue 27).

The FP8 twin of the tiny Llama built by conftest: the class decides which split each
weight gets at ``--tp 2`` (column for q/k/v/gate/up, row for o/down). About 2 s once the
session's twin exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import flexq
from flexq.check.report import VerifyReport
from flexq.cli.main import main

if TYPE_CHECKING:
    from .conftest import Checkpoints

pytest.importorskip("paddleformers")

LAYER = "model.layers.0"
COLUMN = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
)
ROW = ("self_attn.o_proj", "mlp.down_proj")


def test_model_splits_each_weight_only_as_its_class_does(
    checkpoints: Checkpoints, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = checkpoints.twin("LlamaForCausalLM", "fp8")
    report = flexq.verify(ckpt, tp=2, model="LlamaForCausalLM")
    assert report.problems == []  # information, not a problem, without --keep-quantized
    rows = {(s.tensor, s.split) for s in report.splits if s.tensor.startswith(LAYER + ".")}
    assert rows == {(f"{LAYER}.{k}.weight", "column") for k in COLUMN} | {
        (f"{LAYER}.{k}.weight", "row") for k in ROW
    }
    # without the class both ways are reported, each aligned or not as with the class
    plain = {(s.tensor, s.split): s.aligned for s in flexq.verify(ckpt, tp=2).splits}
    assert len(plain) == 2 * len(report.splits)
    assert all(plain[s.tensor, s.split] == s.aligned for s in report.splits)
    args = ["verify", str(ckpt), "--tp", "2", "--model", "LlamaForCausalLM", "--json"]
    code, out, _ = main_run(args, capsys)
    assert code == 0
    assert VerifyReport.model_validate_json(out).splits == report.splits


def test_an_unknown_class_is_a_usage_error(
    checkpoints: Checkpoints, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = checkpoints.twin("LlamaForCausalLM", "fp8")
    with pytest.raises(flexq.FlexqError, match="not a PaddleFormers model class"):
        flexq.verify(ckpt, tp=2, model="NoSuchForCausalLM")
    code, out, err = main_run(["verify", str(ckpt), "--tp", "2", "--model", "NoSuch"], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("flexq: error: --model 'NoSuch': not a PaddleFormers model class")
    assert err.count("\n") == 1


def main_run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err
