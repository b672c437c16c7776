"""The kit's qweight linears: module keys, shape and the analysis of X.qweight checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import flexq
from flexq.formatkit import QLinearKeys, check_stored, qweight_analysis, require_companions


@dataclass(frozen=True)
class Lin(QLinearKeys):
    prefix: str
    out_features: int = 2
    in_features: int = 3
    dtype: str = "float16"

    @property
    def sources(self) -> list[str]:
        return [self.qweight, self.qzeros, self.scales]


def written(tmp_path: Path, keys: list[str]) -> flexq.Checkpoint:
    tensors = {k: flexq.RawTensor.of(np.zeros(2, np.int32)) for k in keys}
    return flexq.Checkpoint(flexq.save_checkpoint(tmp_path, tensors))


def test_keys_follow_the_module_prefix() -> None:
    lin = Lin("model.layers.0.mlp.up_proj")
    assert lin.logical_key == "model.layers.0.mlp.up_proj.weight"
    assert lin.shape == (2, 3)
    assert lin.sources == [
        "model.layers.0.mlp.up_proj.qweight",
        "model.layers.0.mlp.up_proj.qzeros",
        "model.layers.0.mlp.up_proj.scales",
    ]


def test_analysis_builds_every_qweight_in_key_order_and_recognizes_components(
    tmp_path: Path,
) -> None:
    keys = ["b.qweight", "b.qzeros", "b.scales", "a.qweight", "a.qzeros", "a.scales"]
    ckpt = written(tmp_path, [*keys, "orphan.qzeros", "norm.weight"])
    built: list[str] = []

    def build(prefix: str) -> Lin:
        built.append(prefix)
        return Lin(prefix)

    found = qweight_analysis(
        ckpt, ("qweight", "qzeros", "scales"), build, where="cfg", method="m", format_name="f"
    )
    assert built == ["a", "b"]
    assert list(found.tensors) == ["a.weight", "b.weight"]
    assert found.tensors["b.weight"] == Lin("b")
    assert set(found.recognized) == {*keys, "orphan.qzeros"}


def test_a_claiming_config_without_any_qweight_is_a_format_error(tmp_path: Path) -> None:
    ckpt = written(tmp_path, ["w"])
    with pytest.raises(
        flexq.FormatError,
        match=r"cfg: quant_method 'm', but no tensor is a '<module>.qweight' "
        r"\(tensor dtypes: I32\) \(format 'f'\)",
    ):
        qweight_analysis(ckpt, ("qweight",), Lin, where="cfg", method="m", format_name="f")


def fail(key: str, msg: str) -> flexq.FormatError:
    return flexq.FormatError(f"{key} {msg}")


def test_require_companions_names_the_first_missing_one_on_the_qweight(tmp_path: Path) -> None:
    ckpt = written(tmp_path, ["m.qweight", "m.scales"])
    require_companions(ckpt.tensors, "m", ("scales",), fail)
    with pytest.raises(flexq.FormatError, match=r"^m\.qweight has no companion m\.qzeros "):
        require_companions(ckpt.tensors, "m", ("scales", "qzeros", "g_idx"), fail)


def test_check_stored_checks_dtype_then_rank_in_order(tmp_path: Path) -> None:
    ckpt = written(tmp_path, ["m.qweight", "m.scales"])  # both I32 of shape (2,)
    q, s = ckpt.tensors["m.qweight"], ckpt.tensors["m.scales"]
    check_stored([(q, ("I32",), 1), (s, ("F16", "I32"), 1)], fail)
    with pytest.raises(flexq.FormatError, match=r"^m\.qweight has shape \(2,\), expected a 2-D"):
        check_stored([(q, ("I32",), 2), (s, ("F16",), 1)], fail)
    with pytest.raises(flexq.FormatError, match=r"^m\.scales has dtype I32, expected F16 or BF16$"):
        check_stored([(q, ("I32",), 1), (s, ("F16", "BF16"), 2)], fail)
