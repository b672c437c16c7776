"""Every published FP8 layout decodes bit for bit like the ml_dtypes reference.

Each case writes a tiny checkpoint with odd shapes (300x260, partial edge
blocks), weight and scale in different shard files, random codes covering all
256 bytes (NaN codes too) and random scales, then compares ``compose().load``
with the reference in bfloat16, float16 and float32, then loads it into a bfloat16
Paddle target (a weight under one scale rounded by the format itself).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq import RawTensor
from flexq.formatkit import lookup_rounded, run_in_bands_rounded
from flexq.numerics.arrays import host_view
from flexq_fp8 import decode as fp8_decode

FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
FBGEMM = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}


def block_fp8(b0: int, b1: int) -> dict[str, Any]:
    return {**FP8, "fmt": "e4m3", "weight_block_size": [b0, b1]}


def compressed(strategy: str, **weights: Any) -> dict[str, Any]:
    group = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy, **weights}
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": group}},
        "ignore": ["lm_head"],
    }


@dataclass(frozen=True)
class Case:
    """One layout: weight shape, the block the producer used, how the scale is stored."""

    name: str
    shape: tuple[int, ...]
    block: tuple[int, ...]
    scale_dtype: str
    suffix: str
    qc: dict[str, Any] | None = None  # None: no quantization_config
    stored: tuple[int, ...] | None = None  # stored scale shape when not the grid shape
    key: str = "model.layers.0.mlp.down_proj.weight"

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-s // b) for s, b in zip(self.shape, self.block, strict=True))


W = (300, 260)
B128 = block_fp8(128, 128)
CT_BLOCK = compressed("block", block_structure=[128, 64])
#: stacked experts' logical keys ([E, out, in] tensors, no ``.weight``)
UP0, DOWN0 = "model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"
DOWN1 = "model.layers.1.mlp.experts.down_proj"
E128 = (1, 128, 128)  # a 128x128 block of each expert
CASES = [
    Case("per-tensor 0-d F32 (AutoFP8)", W, W, "F32", "_scale", FP8, stored=()),
    Case("per-tensor (1,) compressed-tensors", W, W, "F32", "_scale", compressed("tensor"), (1,)),
    Case("per-channel [out,1] FBGEMM", W, (1, 260), "F32", "_scale", FBGEMM),
    Case("per-channel (out,) without config", W, (1, 260), "F32", "_scale", None, stored=(300,)),
    Case("block 128x128 F32", W, (128, 128), "F32", "_scale_inv", B128),
    Case("block 128x128 BF16", W, (128, 128), "BF16", "_scale_inv", B128),
    Case("block 128x128 F16", W, (128, 128), "F16", "_scale_inv", B128),
    Case("block E8M0 as U8", W, (128, 128), "U8", "_scale_inv", B128),
    Case("block E8M0 as F8_E8M0", W, (128, 128), "F8_E8M0", "_scale_inv", B128),
    Case("block 128x64, whole column blocks", (300, 256), (128, 64), "F32", "_scale_inv", None),
    Case("block 64x32 from config", W, (64, 32), "F32", "_scale_inv", block_fp8(64, 32)),
    Case("block 128 inferred without config", W, (128, 128), "F32", "_scale_inv", None),
    Case("block 64 inferred without config", W, (64, 64), "BF16", "_scale_inv", None),
    Case("block 25x20 inferred (no power of two fits)", W, (25, 20), "F32", "_scale_inv", None),
    Case("ct group 32 BF16", W, (1, 32), "BF16", "_scale", compressed("group", group_size=32)),
    Case("ct channel BF16", W, (1, 260), "BF16", "_scale", compressed("channel")),
    Case("ct block 128x64", W, (128, 64), "BF16", "_scale", CT_BLOCK),
    Case(
        "stacked experts [E,out,in] block", (3, 300, 260), E128, "F32", "_scale_inv", B128, key=UP0
    ),
    Case(
        "stacked experts BF16 without config", (2, 200, 136), E128, "BF16", "_scale_inv", key=DOWN0
    ),
    Case(
        "stacked experts per-expert scalar (E,)",
        (3, 40, 24),
        (1, 40, 24),
        "F32",
        "_scale",
        key=DOWN1,
        stored=(3,),
    ),
]


def write_case(
    case: Case, path: Path, rng: np.random.Generator, make_codes: Any, make_scale: Any
) -> tuple[np.ndarray, RawTensor]:
    codes = make_codes(rng, case.shape)
    scale = make_scale(rng, case.grid, case.scale_dtype)
    stored = (
        scale if case.stored is None else RawTensor(scale.dtype, scale.data.reshape(case.stored))
    )
    tensors = {
        case.key: RawTensor("F8_E4M3", codes),
        case.key + case.suffix: stored,
        "model.norm.weight": RawTensor("BF16", np.arange(8, dtype=np.uint16) + 0x3F80),
    }
    config: dict[str, Any] = {"torch_dtype": "bfloat16"}
    if case.qc is not None:
        config["quantization_config"] = case.qc
    flexq.save_checkpoint(
        path,
        tensors,
        config=config if case.qc is not None else None,
        shard_of={case.key + case.suffix: 1, "model.norm.weight": 1},
    )
    return codes, scale


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_layout_decodes_bit_exact_like_ml_dtypes_reference(
    case: Case,
    tmp_path: Path,
    rng: np.random.Generator,
    make_codes: Callable[..., np.ndarray],
    make_scale: Callable[..., RawTensor],
    reference: Callable[..., np.ndarray],
    rounder: Callable[[np.ndarray, str], np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    codes, scale = write_case(case, tmp_path, rng, make_codes, make_scale)
    ct = flexq.compose(tmp_path, formats=["fp8"])
    # weight and scale really live in different shard files
    files = {ct.checkpoint.info(k).file for k in ct.source_keys(case.key)}
    assert len(files) == 2
    assert ct.entries[case.key].owner == "fp8"
    assert ct.entries[case.key].shape == case.shape
    expected = reference(codes, scale, case.block)
    assert np.isnan(expected).any()  # NaN codes stay NaN
    for out in ("float32", "bfloat16", "float16"):
        got = ct.load(case.key, out)
        want = rounder(expected, out)
        bits = np.uint32 if out == "float32" else np.uint16
        np.testing.assert_array_equal(got.view(bits), want.view(bits), err_msg=out)
    # A load into a bfloat16 Paddle target: the format rounds the weight itself, straight
    # into the target's memory (BoxSources.rounded_out): under one scale by its 256
    # codes' rounded products, else band by band while each band is in cache.
    import paddle

    calls: list[tuple[str, tuple[int, ...]]] = []
    table, bands = lookup_rounded, run_in_bands_rounded  # what the decode module imported

    def table_spy(table_: np.ndarray, codes: np.ndarray, scale: Any, out: np.ndarray) -> Any:
        calls.append(("table", codes.shape))
        return table(table_, codes, scale, out)

    def bands_spy(work: Any, codes: np.ndarray, rounded: np.ndarray, *side: Any) -> Any:
        calls.append(("bands", codes.shape))
        return bands(work, codes, rounded, *side)

    monkeypatch.setattr(fp8_decode, "lookup_rounded", table_spy)
    monkeypatch.setattr(fp8_decode, "run_in_bands_rounded", bands_spy)
    sd = {case.key: paddle.zeros(list(case.shape), "bfloat16")}
    flexq.load_state_dict(sd, tmp_path, formats=["fp8"])
    np.testing.assert_array_equal(host_view(sd[case.key]), rounder(expected, "bfloat16"))
    ways = {way for way, _ in calls}
    assert ways == ({"table"} if math.prod(case.grid) == 1 else {"bands"})
    # every value of the weight went through exactly one rounded call
    assert sum(math.prod(shape) for _, shape in calls) == math.prod(case.shape)


def test_unquantized_tensors_pass_through_beside_fp8(
    tmp_path: Path,
    rng: np.random.Generator,
    make_codes: Callable[..., np.ndarray],
    make_scale: Callable[..., RawTensor],
) -> None:
    write_case(CASES[4], tmp_path, rng, make_codes, make_scale)
    ct = flexq.compose(tmp_path, formats=["fp8"])
    norm = ct.entries["model.norm.weight"]
    assert norm.is_passthrough
    np.testing.assert_array_equal(
        ct.load("model.norm.weight", "bfloat16"), np.arange(8, dtype=np.uint16) + 0x3F80
    )


def test_logical_dtype_follows_config_torch_dtype(
    tmp_path: Path, rng: np.random.Generator, make_codes: Callable[..., np.ndarray]
) -> None:
    codes = make_codes(rng, (16, 8))
    flexq.save_checkpoint(
        tmp_path,
        {
            "a.weight": RawTensor("F8_E4M3", codes),
            "a.weight_scale": RawTensor.of(np.ones(1, np.float32)),
        },
        config={"torch_dtype": "float16", "quantization_config": FP8},
    )
    ct = flexq.compose(tmp_path, formats=["fp8"])
    assert ct.entries["a.weight"].dtype == "float16"
    assert ct.load("a.weight").dtype == np.float16
