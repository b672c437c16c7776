"""What a Quark export flexq does not decode exactly is a clear FormatError, never a pass-through."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flexq import FormatError, compose


def _compose(oracle: Any, write_checkpoint: Any, tensors: Any, config: Any) -> Any:
    return compose(write_checkpoint(tensors, config), ["quark"])


@pytest.mark.parametrize(
    ("weight", "scheme"),
    [
        ({"dtype": "fp8_e5m2", "qscheme": "per_tensor"}, "fp8_e5m2/per_tensor"),
        (
            {"dtype": "fp8_e4m3", "qscheme": "per_block", "block_size": [128, 128]},
            "fp8_e4m3/per_block",
        ),
        ({"dtype": "int8", "qscheme": "per_channel"}, "int8/per_channel"),
        (
            {"dtype": "mx", "qscheme": "per_group", "group_size": 32, "mx_element_dtype": "fp4"},
            "mx/per_group",
        ),
    ],
)
def test_an_unsupported_scheme_names_tensor_scheme_and_what_to_do(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator, weight: Any, scheme: str
) -> None:
    lin = oracle.Linear(rng, "fp8-tensor", 8, 32)
    config = oracle.quark_config(oracle.spec(**weight))
    with pytest.raises(FormatError, match=rf"'fc.weight'.*{scheme}.*does not decode.*re-export"):
        _compose(oracle, write_checkpoint, lin.raw(), config)


def test_a_two_stage_weight_scheme_is_refused(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    lin = oracle.Linear(rng, "mxfp4", 8, 32)
    two = [oracle.SPECS["mxfp4"], oracle.spec("fp8_e4m3", "per_tensor", is_scale_quant=True)]
    with pytest.raises(FormatError, match=r"'fc.weight'.*two-stage weight scheme"):
        _compose(oracle, write_checkpoint, lin.raw(), oracle.quark_config(two))


def test_layer_quant_config_overrides_global_and_excluded_quantized_weight_is_an_error(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    fp8 = oracle.Linear(rng, "fp8-channel", 8, 32)
    int4 = oracle.Linear(rng, "int4-group", 8, 32)
    config = oracle.quark_config(oracle.SPECS["fp8-channel"])
    config["quantization_config"]["layer_quant_config"] = {
        "*down*": {"weight": oracle.SPECS["int4-group"]}
    }
    tensors = {**fp8.raw("up"), **int4.raw("down")}
    ct = _compose(oracle, write_checkpoint, tensors, config)
    oracle.same_bits(ct.load("up.weight", "float32"), fp8.reference())
    oracle.same_bits(ct.load("down.weight", "float32"), int4.reference())
    config["quantization_config"]["exclude"] = ["down"]
    with pytest.raises(
        FormatError, match=r"'down.weight'.*exclude\['down'\].*leaves module 'down' unquantized"
    ):
        _compose(oracle, write_checkpoint, tensors, config)


def test_an_orphaned_weight_scale_is_reported(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    lin = oracle.Linear(rng, "fp8-tensor", 8, 32)
    tensors = {**lin.raw(), "other.weight_scale": oracle.bf16(np.float32(1.0))}
    with pytest.raises(FormatError, match=r"'other.weight_scale'.*orphan"):
        _compose(oracle, write_checkpoint, tensors, oracle.quark_config(oracle.SPECS["fp8-tensor"]))


@pytest.mark.parametrize(
    ("kind", "missing"), [("fp8-channel", "weight_scale"), ("uint4-group", "weight_zero_point")]
)
def test_a_missing_companion_is_an_error(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator, kind: str, missing: str
) -> None:
    lin = oracle.Linear(rng, kind, 8, 32)
    tensors = {k: v for k, v in lin.raw().items() if k != f"fc.{missing}"}
    with pytest.raises(
        FormatError, match=rf"'fc.weight'.*no companion fc.{missing} \(missing component\)"
    ):
        _compose(oracle, write_checkpoint, tensors, oracle.quark_config(oracle.SPECS[kind]))


def test_a_scale_of_the_wrong_shape_is_an_error(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    per_channel = oracle.Linear(rng, "fp8-channel", 8, 32)
    with pytest.raises(
        FormatError, match=r"'fc.weight_scale'.*shape \(8,\), expected \(\) for fp8-tensor"
    ):
        _compose(
            oracle,
            write_checkpoint,
            per_channel.raw(),
            oracle.quark_config(oracle.SPECS["fp8-tensor"]),
        )


def test_a_module_type_override_other_than_linear_is_refused(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    lin = oracle.Linear(rng, "fp8-tensor", 8, 32)
    config = oracle.quark_config(oracle.SPECS["fp8-tensor"])
    config["quantization_config"]["layer_type_quant_config"] = {
        "Conv2d": {"weight": oracle.SPECS["fp8-tensor"]}
    }
    with pytest.raises(
        FormatError, match=r"layer_type_quant_config names module types \['Conv2d'\]"
    ):
        _compose(oracle, write_checkpoint, lin.raw(), config)


def test_a_fake_quantized_export_is_refused(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    lin = oracle.Linear(rng, "fp8-tensor", 8, 32)
    config = oracle.quark_config(oracle.SPECS["fp8-tensor"])
    config["quantization_config"]["export"]["weight_format"] = "fake_quantized"
    with pytest.raises(FormatError, match=r"'fake_quantized' export holds plain floats"):
        _compose(oracle, write_checkpoint, lin.raw(), config)


def test_inspect_exits_2_with_one_line_for_an_unsupported_scheme(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator, capsys: pytest.CaptureFixture[str]
) -> None:
    from flexq.cli import main

    lin = oracle.Linear(rng, "fp8-tensor", 8, 32)
    path = write_checkpoint(lin.raw(), oracle.quark_config(oracle.spec("fp8_e5m2", "per_tensor")))
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("flexq: error: ")
    assert "fp8_e5m2/per_tensor" in err[0]
