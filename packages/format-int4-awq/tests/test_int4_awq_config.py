"""Config keys, detection and the errors bad AWQ checkpoints get (naming file, tensor, format)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from flexq import Checkpoint, FormatError, RawTensor, compose
from flexq_int4_awq.config import read_config
from flexq_int4_awq.layout import gemv_zeros_width


@pytest.fixture
def gemm(oracle: Any, rng: np.random.Generator) -> Any:
    return oracle.random_awq(rng, "gemm", 16, 64, 16)


def _qc(**keys: Any) -> dict[str, Any]:
    return {"quantization_config": {"quant_method": "awq", **keys}}


def test_autoawq_key_spellings_w_bit_and_q_group_size_are_read(
    gemm: Any, oracle: Any, write_checkpoint: Any
) -> None:
    cfg = _qc(w_bit=4, q_group_size=16, zero_point=True, version="GEMM")
    ct = compose(write_checkpoint(gemm.raw("fc"), cfg), ["int4-awq"])
    oracle.same_bits(ct.load("fc.weight", "float32"), gemm.reference())


def test_version_defaults_to_gemm_and_modules_to_not_convert_is_read(
    write_checkpoint: Any, gemm: Any
) -> None:
    cfg = _qc(bits=4, group_size=16, modules_to_not_convert=["lm_head", "vision"])
    config = read_config(Checkpoint(write_checkpoint(gemm.raw("fc"), cfg)))
    assert config is not None
    assert (config.version, config.group_size, config.zero_point) == ("gemm", 16, True)
    assert config.ignored.entries == (
        ("modules_to_not_convert", "lm_head"),
        ("modules_to_not_convert", "vision"),
    )


def test_checkpoint_without_awq_config_is_not_claimed(write_checkpoint: Any, gemm: Any) -> None:
    cfg = {"quantization_config": {"quant_method": "gptq", "bits": 4}}
    path = write_checkpoint(gemm.raw("fc"), cfg)
    with pytest.raises(FormatError, match="'gptq', which no format in \\['int4-awq'\\] decodes"):
        compose(path, ["int4-awq"])
    ct = compose(path, ["int4-awq"], allow_unclaimed=True)
    assert all(e.is_passthrough for e in ct.entries.values())
    assert set(ct.entries) == {"fc.qweight", "fc.qzeros", "fc.scales"}


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"bits": 3, "group_size": 16}, "3-bit AWQ is not supported"),
        ({"w_bit": 8, "group_size": 16}, "8-bit AWQ is not supported"),
        ({"group_size": 16}, "needs 'bits'"),
        ({"bits": 4}, "needs 'group_size'"),
        ({"bits": 4, "w_bit": 8, "group_size": 16}, "disagree"),
        ({"bits": "4", "group_size": 16}, "bits: Input should be a valid integer"),
        ({"bits": 4, "group_size": 0}, "group_size must be -1 or positive"),
        ({"bits": 4, "group_size": 16, "version": "marlin"}, "version 'marlin' is not supported"),
        ({"bits": 4, "group_size": 16, "version": "gemv_fast"}, "'gemv_fast' is not supported"),
        (
            {"bits": 4, "group_size": 16, "modules_to_not_convert": "lm_head"},
            "list of module names",
        ),
    ],
)
def test_unsupported_config_is_a_format_error_naming_config_and_format(
    keys: dict[str, Any], message: str, write_checkpoint: Any, gemm: Any
) -> None:
    path = write_checkpoint(gemm.raw("fc"), _qc(**keys))
    with pytest.raises(FormatError, match=message) as err:
        compose(path, ["int4-awq"])
    assert str(path / "config.json") in str(err.value)
    assert "'int4-awq'" in str(err.value)


def test_auto_round_export_with_zero_point_false_decodes_with_its_stored_zeros(
    write_checkpoint: Any, gemm: Any, oracle: Any
) -> None:
    # auto-round's auto_awq export: the GEMM layout, zero_point false, every qzeros word 8s.
    gemm.qzeros = np.full_like(gemm.qzeros, np.uint32(0x88888888).view(np.int32))
    cfg = _qc(bits=4, group_size=16, zero_point=False, version="gemm")
    ct = compose(write_checkpoint(gemm.raw("fc"), cfg), ["int4-awq"])
    got = ct.load("fc.weight", "float32")
    oracle.same_bits(got, gemm.reference())
    # the reference subtracts the stored 8s: (q - 8) * s, element by element
    q = oracle.nibble(gemm.qweight[:, 0], 0).astype(np.float32)
    s = gemm.scales[np.arange(64) // 16, 0].astype(np.float32)
    np.testing.assert_array_equal(got[0], (q - 8) * s)


def test_zero_point_false_without_qzeros_is_an_error_naming_tensor_and_config(
    write_checkpoint: Any, gemm: Any
) -> None:
    tensors = gemm.raw("fc")
    del tensors["fc.qzeros"]
    path = write_checkpoint(tensors, _qc(bits=4, group_size=16, zero_point=False))
    with pytest.raises(
        FormatError, match=r"'fc\.qweight'.*no fc\.qzeros.*zero_point is false.*'int4-awq'"
    ) as err:
        compose(path, ["int4-awq"])
    assert "model.safetensors" in str(err.value)


def test_missing_qzeros_is_an_error_naming_the_tensor(
    write_checkpoint: Any, gemm: Any, oracle: Any
) -> None:
    tensors = gemm.raw("layers.0.fc")
    del tensors["layers.0.fc.qzeros"]
    with pytest.raises(
        FormatError, match=r"'layers.0.fc.qweight'.*no companion layers.0.fc.qzeros"
    ):
        compose(write_checkpoint(tensors, oracle.awq_config("gemm", 16)), ["int4-awq"])


@pytest.mark.parametrize("component", ["qzeros", "scales"])
def test_orphaned_zeros_or_scales_without_qweight_are_reported(
    component: str, write_checkpoint: Any, gemm: Any, oracle: Any
) -> None:
    tensors = {**gemm.raw("fc"), f"other.{component}": gemm.raw("fc")[f"fc.{component}"]}
    path = write_checkpoint(tensors, oracle.awq_config("gemm", 16))
    with pytest.raises(FormatError, match=rf"'other.{component}'.*orphaned component"):
        compose(path, ["int4-awq"])
    ct = compose(path, ["int4-awq"], strict=False)
    assert len(ct.problems) == 1
    assert "int4-awq" in ct.problems[0]


def test_quantized_module_listed_in_modules_to_not_convert_is_an_error(
    write_checkpoint: Any, gemm: Any, oracle: Any
) -> None:
    cfg = oracle.awq_config("gemm", 16, modules_to_not_convert=["mlp.gate"])
    with pytest.raises(FormatError, match=r"'layers.0.mlp.gate.qweight'.*modules_to_not_convert"):
        compose(write_checkpoint(gemm.raw("layers.0.mlp.gate"), cfg), ["int4-awq"])


@pytest.mark.parametrize(
    ("entry", "covered"),
    [("gate", False), ("mlp.gate_proj", True), ("layers.*.mlp", True), ("re:.*gate_p", True)],
)
def test_modules_to_not_convert_follows_the_one_ignore_rule(
    entry: str, covered: bool, write_checkpoint: Any, gemm: Any, oracle: Any
) -> None:
    # Whole components, globs and re: regexes, as every format matches them (the kit's
    # IgnoreList); AutoAWQ's substring test would also let "gate" cover "gate_proj".
    cfg = oracle.awq_config("gemm", 16, modules_to_not_convert=[entry])
    path = write_checkpoint(gemm.raw("layers.0.mlp.gate_proj"), cfg)
    if covered:
        with pytest.raises(FormatError, match=rf"gate_proj.qweight'.*{re.escape(repr(entry))}"):
            compose(path, ["int4-awq"])
    else:
        ct = compose(path, ["int4-awq"])
        assert ct.entries["layers.0.mlp.gate_proj.weight"].owner == "int4-awq"


def test_unquantized_module_in_modules_to_not_convert_passes_through(
    write_checkpoint: Any, gemm: Any, oracle: Any, rng: np.random.Generator
) -> None:
    head = RawTensor.of(rng.standard_normal((8, 64)).astype(np.float16))
    cfg = oracle.awq_config("gemm", 16, modules_to_not_convert=["lm_head"])
    ct = compose(write_checkpoint({**gemm.raw("fc"), "lm_head.weight": head}, cfg), ["int4-awq"])
    assert ct.entries["lm_head.weight"].is_passthrough
    assert ct.entries["fc.weight"].owner == "int4-awq"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: {**t, "fc.scales": RawTensor.of(t["fc.scales"].data[:2])}, r"'fc.scales'.*expected \(4, 16\)"),
        (lambda t: {**t, "fc.qzeros": RawTensor.of(t["fc.qzeros"].data[:, :1])}, r"'fc.qzeros'.*expected \(4, 2\)"),
        (lambda t: {**t, "fc.qweight": RawTensor.of(t["fc.qweight"].data.view(np.float32))}, "dtype F32, expected I32"),
        (lambda t: {**t, "fc.scales": RawTensor.of(t["fc.scales"].data.astype(np.int32))}, "dtype I32, expected F16 or BF16 or F32"),
        (lambda t: {**t, "fc.qweight": RawTensor.of(t["fc.qweight"].data[:60])}, "not a positive multiple of group_size 16"),
    ],
)  # fmt: skip
def test_malformed_components_are_errors_naming_file_and_tensor(
    mutate: Any, message: str, write_checkpoint: Any, gemm: Any, oracle: Any
) -> None:
    path = write_checkpoint(mutate(gemm.raw("fc")), oracle.awq_config("gemm", 16))
    with pytest.raises(FormatError, match=message) as err:
        compose(path, ["int4-awq"])
    assert "model.safetensors" in str(err.value)
    assert "'int4-awq'" in str(err.value)


def test_gemv_with_a_group_size_autoawq_cannot_pack_is_an_error(
    write_checkpoint: Any, oracle: Any
) -> None:
    tensors = {
        "fc.qweight": RawTensor.of(np.zeros((8, 8), dtype=np.int32)),
        "fc.qzeros": RawTensor.of(np.zeros((8, 1), dtype=np.int32)),
        "fc.scales": RawTensor.of(np.zeros((8, 8), dtype=np.float16)),
    }
    with pytest.raises(FormatError, match="GEMV layout does not support group_size 16"):
        compose(write_checkpoint(tensors, oracle.awq_config("gemv", 16)), ["int4-awq"])


@pytest.mark.parametrize(
    ("n_groups", "group", "width"),
    [(1, 4096, 1), (32, 128, 4), (33, 128, 5), (2, 64, 2), (17, 64, 4), (2, 32, 4), (40, 32, 8)],
)
def test_gemv_zeros_width_follows_autoawq_padding(
    n_groups: int, group: int, width: int, oracle: Any
) -> None:
    assert gemv_zeros_width(n_groups, group) == width == oracle.gemv_width(n_groups, group)
