"""A quantization method two formats claim (auto-round: GPTQ-style integers and NVFP4)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import flexq


class Claims:
    """Claims the logical tensor ``<base>`` built from ``<base>.q`` under ``shared-method``."""

    def __init__(self, base: str) -> None:
        self.base = base

    @flexq.hookimpl
    def flexq_quant_methods(self) -> list[str]:
        return ["shared-method"]

    @flexq.hookimpl
    def flexq_logical_metadata(
        self, checkpoint: flexq.Checkpoint
    ) -> dict[str, flexq.LogicalTensor]:
        info = checkpoint.tensors.get(self.base + ".q")
        return {} if info is None else {self.base: flexq.LogicalTensor(info.shape, "float32")}

    @flexq.hookimpl
    def flexq_source_keys(self, logical_key: str) -> list[str]:
        return [logical_key + ".q"]


@pytest.fixture
def two_claimers() -> Iterator[tuple[str, str]]:
    first = flexq.register_format(Claims("a"), name="claims-a")
    second = flexq.register_format(Claims("b"), name="claims-b")
    try:
        yield first, second
    finally:
        flexq.unregister_format(first)
        flexq.unregister_format(second)


def write(directory: Path, key: str) -> Path:
    tensors = {key: flexq.RawTensor("I8", np.zeros((2, 2), np.int8))}
    return flexq.save_checkpoint(
        directory, tensors, config={"quantization_config": {"quant_method": "shared-method"}}
    )


def test_a_method_is_matched_when_any_of_its_claimers_finds_tensors(
    tmp_path: Path, two_claimers: tuple[str, str]
) -> None:
    path = write(tmp_path / "c", "a.q")
    ct = flexq.compose(path, list(two_claimers))
    assert ct.entries["a"].owner == "claims-a"
    with pytest.raises(flexq.FormatError, match=r"format 'claims-b' found none of its tensors"):
        flexq.compose(path, ["claims-b"])


def test_a_method_none_of_its_claimers_finds_names_them_all(
    tmp_path: Path, two_claimers: tuple[str, str]
) -> None:
    path = write(tmp_path / "c", "other.q")
    with pytest.raises(
        flexq.FormatError, match=r"format 'claims-a' or 'claims-b' found none of its tensors"
    ):
        flexq.compose(path, list(two_claimers))
