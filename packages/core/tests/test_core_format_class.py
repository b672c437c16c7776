"""The kit's generic Format: a format as its analysis, plan and decode, through every hook."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq.formatkit import Analysis, BoxSources, Encoder, Format, cached_per_checkpoint, ops_for
from flexq.plugin.manager import registry


@dataclass(frozen=True)
class RowScaled:
    """``X.q`` (I8) times ``X.rs`` (F32, one scale per row) makes logical ``X``."""

    key: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def sources(self) -> tuple[str, str]:
        return self.key + ".q", self.key + ".rs"


@cached_per_checkpoint
def analyze(ckpt: flexq.Checkpoint) -> Analysis[RowScaled]:
    found = {
        k[:-2]: RowScaled(k[:-2], info.shape)
        for k, info in ckpt.tensors.items()
        if k.endswith(".q") and k[:-2] + ".rs" in ckpt.tensors
    }
    return Analysis(found, frozenset(k for k in ckpt.tensors if k.endswith(".rs")))


def plan(t: RowScaled, target: flexq.TargetSlice) -> flexq.ReadPlan:
    (r0, _), (nr, _) = target.global_offset, target.local_shape
    q, rs = t.sources
    return flexq.ReadPlan("local", {q: target.box, rs: ((r0,), (nr,))}, target, scales=(rs,))


def decode(t: RowScaled, sources: BoxSources, out: Any) -> Any:
    q, rs = (sources[k] for k in t.sources)
    ops = ops_for(q)
    return ops.float32(q, "I8") * ops.reshape(ops.float32(rs, "F32"), (-1, 1))


def encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, flexq.RawTensor]
) -> float:
    tensors = dict(others)
    for key, w in weights.items():
        scale = (np.abs(w).max(axis=1) / 127).astype(np.float32)
        tensors[key + ".q"] = flexq.RawTensor.of(np.rint(w / scale[:, None]).astype(np.int8))
        tensors[key + ".rs"] = flexq.RawTensor.of(scale)
    flexq.save_checkpoint(directory, tensors)
    return 0.99


PLUGIN = Format(
    "rowscaled",
    "int8 codes with one float32 scale per row",
    methods=("rowscaled",),
    analyze=analyze,
    plan=plan,
    decode=decode,
    encode=encode,
)


@pytest.fixture
def rowscaled() -> Iterator[str]:
    name = flexq.register_format(PLUGIN)
    try:
        yield name
    finally:
        flexq.unregister_format(name)


def test_a_format_object_is_listed_with_its_name_description_and_methods(rowscaled: str) -> None:
    row = next(r for r in flexq.list_formats() if r.name == rowscaled)
    assert rowscaled == "rowscaled"
    assert row.description == "int8 codes with one float32 scale per row"
    assert row.methods == ("rowscaled",)
    assert registry.encoders().count("rowscaled") == 1


def test_a_format_object_loads_local_boxes_exactly(rowscaled: str, tmp_path: Path) -> None:
    w = {"lin": np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)}
    assert registry.encode(rowscaled, tmp_path, w, {}) == 0.99
    ct = flexq.compose(tmp_path)
    assert ct.entries["lin"].owner == "rowscaled"
    assert ct.entries["lin"].sources == ("lin.q", "lin.rs")
    whole = ct.load("lin", "float32")
    with flexq.Checkpoint(tmp_path) as ckpt:
        q, rs = ckpt.read("lin.q"), ckpt.read("lin.rs")
    np.testing.assert_array_equal(whole, q.astype(np.float32) * rs[:, None])
    target = flexq.TargetSlice((6, 5), (2, 5), (3, 0), "float32")
    box = ct.plan("lin", target)
    assert box.source_slices["lin.rs"] == ((3,), (2,))
    got = ct.decode("lin", ct.read_sources(box), box, "float32")
    np.testing.assert_array_equal(got, whole[3:5])


def test_a_tensor_the_format_did_not_claim_is_a_format_error(
    rowscaled: str, tmp_path: Path
) -> None:
    flexq.save_checkpoint(tmp_path, {"x": flexq.RawTensor.of(np.zeros(2, np.float32))})
    with (
        flexq.Checkpoint(tmp_path) as ckpt,
        pytest.raises(flexq.FormatError, match="'x' is not a tensor of format 'rowscaled'"),
    ):
        PLUGIN.layout(ckpt, "x")


def test_missing_sources_in_apply_name_them(rowscaled: str, tmp_path: Path) -> None:
    registry.encode(rowscaled, tmp_path, {"lin": np.ones((2, 2), np.float32)}, {})
    ct = flexq.compose(tmp_path)
    plan_ = ct.plan("lin", flexq.TargetSlice.whole((2, 2), "float32"))
    with pytest.raises(flexq.FormatError, match=r"needs \['lin.rs'\]"):
        ct.decode("lin", {"lin.q": np.ones((2, 2), np.int8)}, plan_, "float32")


def test_sources_map_the_boxes_and_name_a_box_of_the_wrong_shape(
    rowscaled: str, tmp_path: Path
) -> None:
    registry.encode(rowscaled, tmp_path, {"lin": np.ones((6, 5), np.float32)}, {})
    ct = flexq.compose(tmp_path)
    plan_ = ct.plan("lin", flexq.TargetSlice((6, 5), (2, 5), (3, 0), "float32"))
    sources = BoxSources(ct.checkpoint, plan_, ct.read_sources(plan_))
    assert sorted(sources) == ["lin.q", "lin.rs"]
    assert len(sources) == 2
    assert sources.target is plan_.target
    assert sources.offset("lin.rs") == (3,)
    sources.expect({"lin.q": (2, 5), "lin.rs": (2,)}, logical_key="lin", format_name="rowscaled")
    with pytest.raises(
        flexq.FormatError,
        match=r"^model.safetensors: tensor 'lin.rs' arrived with shape \(2,\), the plan for "
        r"'lin' needs \(3,\) \(format 'rowscaled'\)$",
    ):
        sources.expect({"lin.rs": (3,)}, logical_key="lin", format_name="rowscaled")


def test_an_encoder_writes_others_and_quantized_tensors_with_its_config(tmp_path: Path) -> None:
    def quantize(weights: Mapping[str, np.ndarray]) -> dict[str, flexq.RawTensor]:
        return {
            k + ".q": flexq.RawTensor.of(np.rint(w).astype(np.int8)) for k, w in weights.items()
        }

    config = {"model_type": "llama", "quantization_config": {"quant_method": "rowscaled"}}
    encoder = Encoder(quantize, config, 0.97)
    norm = flexq.RawTensor.of(np.ones(3, np.float32))
    got = encoder(tmp_path, {"lin": np.full((2, 2), 3.2, np.float32)}, {"norm": norm})
    assert got == 0.97
    with flexq.Checkpoint(tmp_path) as ckpt:
        assert sorted(ckpt.tensors) == ["lin.q", "norm"]
        np.testing.assert_array_equal(ckpt.read("lin.q"), np.full((2, 2), 3, np.int8))
        assert ckpt.quantization_config == {"quant_method": "rowscaled"}
    fmt = Format("enc", "d", methods=(), analyze=analyze, plan=plan, decode=decode, encode=encoder)
    assert fmt.flexq_encode(tmp_path / "again", {}, {"norm": norm}) == 0.97
