"""Reading quantization_config: scheme matching, strategy inference, act-order spellings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flexq import Checkpoint, FormatError, RawTensor, save_checkpoint
from flexq.formatkit import CtConfig, QuantArgs
from flexq_ct_int.config import read_config


def config_of(tmp_path: Path, qc: dict[str, Any]) -> CtConfig | None:
    tensors = {"x": RawTensor.of(np.zeros(1, np.float32))}
    return read_config(
        Checkpoint(save_checkpoint(tmp_path, tensors, config={"quantization_config": qc}))
    )


def test_exact_names_beat_patterns_which_beat_class_names(tmp_path: Path) -> None:
    groups = {
        "by_class": {"targets": ["Linear"], "weights": {"num_bits": 8}},
        "by_pattern": {"targets": ["re:.*q_proj$"], "weights": {"num_bits": 4}},
        "by_name": {"targets": ["model.q_proj"], "weights": {"num_bits": 2}},
    }
    qc = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": groups}
    config = config_of(tmp_path, qc)
    assert config is not None
    picks = {m: config.scheme_for(m) for m in ("model.q_proj", "model.a.q_proj", "model.v")}
    assert {m: s.group for m, s in picks.items() if s} == {
        "model.q_proj": "by_name",
        "model.a.q_proj": "by_pattern",
        "model.v": "by_class",
    }
    assert picks["model.v"] is not None
    assert picks["model.v"].format == "pack-quantized"


def test_a_dotted_target_naming_another_module_does_not_match(tmp_path: Path) -> None:
    groups = {"g": {"targets": ["model.layers.0.q_proj"], "weights": {"num_bits": 4}}}
    config = config_of(tmp_path, {"quant_method": "compressed-tensors", "config_groups": groups})
    assert config is not None
    assert config.scheme_for("model.layers.1.q_proj") is None


def test_mixed_precision_leaves_the_format_to_each_group(tmp_path: Path) -> None:
    groups = {
        "a": {"targets": ["re:.*mlp.*"], "format": "pack-quantized"},
        "b": {"targets": ["Linear"]},
    }
    qc = {
        "quant_method": "compressed-tensors",
        "format": "mixed-precision",
        "config_groups": groups,
    }
    config = config_of(tmp_path, qc)
    assert config is not None
    assert config.declared_formats == {"pack-quantized"}
    mlp, attn = config.scheme_for("m.mlp.up"), config.scheme_for("m.attn.q")
    assert mlp is not None
    assert attn is not None
    assert (mlp.format, attn.format) == ("pack-quantized", None)


@pytest.mark.parametrize(
    ("fields", "strategy"),
    [({}, "tensor"), ({"group_size": -1}, "channel"), ({"group_size": 64}, "group"),
     ({"strategy": "CHANNEL"}, "channel"), ({"strategy": "block"}, "block")],
)  # fmt: skip
def test_strategy_is_inferred_from_group_size_as_compressed_tensors_does(
    fields: dict[str, Any], strategy: str
) -> None:
    assert QuantArgs.model_validate(fields).resolved_strategy() == strategy


@pytest.mark.parametrize(
    ("actorder", "act_order"),
    [(None, False), (False, False), ("weight", False), ("static", False),
     ("group", True), ("dynamic", True), ("GROUP", True), (True, True)],
)  # fmt: skip
def test_act_order_spellings(actorder: object, act_order: bool) -> None:
    assert QuantArgs.model_validate({"actorder": actorder}).act_order is act_order


def test_other_quant_methods_are_not_read(tmp_path: Path) -> None:
    assert config_of(tmp_path, {"quant_method": "awq", "bits": 4}) is None


def test_a_bad_pattern_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"'re:\(' is not a valid regular expression.*ct-int"):
        config_of(tmp_path, {"quant_method": "compressed-tensors", "ignore": ["re:("]})
