"""Whole-tensor decoding against the independent numpy oracle: NF4/FP4, nested, int8, Paddle."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import paddle
from hypothesis import given
from hypothesis import strategies as st

import flexq
from flexq import RawTensor
from flexq.testing.strategies import any_shape, examples

Build = Callable[..., Path]

FORMATS = ["bitsandbytes"]
KEY = "model.layers.0.mlp.down_proj.weight"


def test_worked_example_high_nibble_first_and_nested_absmax(
    tmp_path: Path, build: Build, kit: Any
) -> None:
    # Bytes 0xF0, 0x7E: NF4 codes 15, 0, 7, 14 -> 1.0, -1.0, 0.0, 0.7229568...
    # One block of 4 with a nested absmax: map[200] * 0.5 + 0.25.
    nested_map = np.linspace(-1, 1, 256, dtype=np.float32)
    state = {"quant_type": "nf4", "blocksize": 4, "dtype": "float16", "shape": [2, 2]}
    state.update(nested_blocksize=256, nested_dtype="float32", nested_offset=0.25)
    tensors = {
        "m.weight": RawTensor("U8", np.array([[0xF0], [0x7E]], dtype=np.uint8)),
        "m.weight.absmax": RawTensor("U8", np.array([200], dtype=np.uint8)),
        "m.weight.nested_absmax": RawTensor("F32", np.array([0.5], dtype=np.float32)),
        "m.weight.nested_quant_map": RawTensor("F32", nested_map),
        "m.weight.quant_map": RawTensor("F32", kit.NF4.copy()),
        "m.weight.quant_state.bitsandbytes__nf4": RawTensor(
            "U8", np.frombuffer(json.dumps(state).encode(), np.uint8).copy()
        ),
    }
    ct = flexq.compose(build(tmp_path / "c", tensors, kit.config_4bit()), formats=FORMATS)
    assert ct.entries["m.weight"].dtype == "float16"
    assert ct.entries["m.weight"].shape == (2, 2)
    absmax = np.float32(nested_map[200] * np.float32(0.5)) + np.float32(0.25)
    want = np.array([[1.0, -1.0], [0.0, 0.7229568362236023]], np.float32) * absmax
    np.testing.assert_array_equal(kit.bits(ct.load("m.weight", "float32")), kit.bits(want))


@st.composite
def four_bit_cases(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "shape": draw(any_shape(side=9, row=200)),
        "quant_type": draw(st.sampled_from(["nf4", "fp4"])),
        "blocksize": draw(st.sampled_from([1, 2, 3, 5, 8, 16, 32, 64, 128])),
        "nested": draw(st.booleans()),
        "nested_blocksize": draw(st.sampled_from([1, 2, 3, 256])),
        "dtype": draw(st.sampled_from(["bfloat16", "float16", "float32"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


@examples(80)
@given(params=four_bit_cases())
def test_four_bit_decodes_bit_exact_against_the_oracle(
    params: dict[str, Any], build: Build, kit: Any
) -> None:
    case = kit.drawn_4bit(params)
    want = kit.reference_4bit(case)
    with tempfile.TemporaryDirectory() as tmp:
        path = build(Path(tmp) / "c", kit.tensors_4bit(KEY, case), kit.config_4bit())
        ct = flexq.compose(path, formats=FORMATS)
        assert ct.entries[KEY].shape == params["shape"]
        assert ct.entries[KEY].dtype == params["dtype"]
        got = ct.load(KEY, "float32")
        np.testing.assert_array_equal(kit.bits(got), kit.bits(want))
        # One rounding, to nearest even, from the float32 result.
        np.testing.assert_array_equal(ct.load(KEY, "bfloat16"), kit.bf16_bits(want))
        np.testing.assert_array_equal(ct.load(KEY, "float16"), want.astype(np.float16))
        ct.checkpoint.close()


@examples(30)
@given(rows=st.integers(1, 12), cols=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_int8_decodes_bit_exact_against_the_oracle(
    rows: int, cols: int, seed: int, build: Build, kit: Any
) -> None:
    cb, scb = kit.random_int8(np.random.default_rng(seed), rows, cols)
    with tempfile.TemporaryDirectory() as tmp:
        path = build(Path(tmp) / "c", kit.tensors_int8("m", cb, scb), kit.config_8bit())
        ct = flexq.compose(path, formats=FORMATS)
        got = ct.load("m.weight", "float32")
        np.testing.assert_array_equal(kit.bits(got), kit.bits(kit.reference_int8(cb, scb)))
        ct.checkpoint.close()


def test_int8_is_times_the_float32_reciprocal_not_divided_by_127(
    tmp_path: Path, build: Build, kit: Any
) -> None:
    # x * float32(1/127) and x / 127 differ in float32 for some values; bnb multiplies.
    cb = np.arange(-127, 128, dtype=np.int8).reshape(1, -1).repeat(4, axis=0)
    scb = np.array([1.0, 3.0, 0.7, 113.25], dtype=np.float32)
    ct = flexq.compose(build(tmp_path / "c", kit.tensors_int8("m", cb, scb)), formats=FORMATS)
    got = ct.load("m.weight", "float32")
    product = cb.astype(np.float32) * scb[:, None]
    np.testing.assert_array_equal(
        kit.bits(got), kit.bits(product * np.float32(7.874015718698502e-3))
    )
    assert not np.array_equal(kit.bits(got), kit.bits(product / np.float32(127)))


def test_int8_natural_dtype_is_the_model_dtype(tmp_path: Path, build: Build, kit: Any) -> None:
    cb, scb = kit.random_int8(np.random.default_rng(0), 3, 4)
    config = {**kit.config_8bit(), "dtype": "float16"}
    ct = flexq.compose(
        build(tmp_path / "c", kit.tensors_int8("m", cb, scb), config), formats=FORMATS
    )
    assert ct.entries["m.weight"].dtype == "float16"


def test_paddle_sources_are_bit_identical_to_numpy(tmp_path: Path, build: Build, kit: Any) -> None:
    rng = np.random.default_rng(3)
    tensors = {}
    cases = {}
    for i, (qt, nested, bs) in enumerate(
        [("nf4", True, 64), ("fp4", False, 24), ("nf4", False, 7)]
    ):
        cases[f"l{i}.weight"] = kit.random_4bit(rng, (6, 40), qt, bs, nested, 4)
        tensors.update(kit.tensors_4bit(f"l{i}.weight", cases[f"l{i}.weight"]))
    cb, scb = kit.random_int8(rng, 5, 9)
    tensors.update(kit.tensors_int8("q", cb, scb))
    ct = flexq.compose(build(tmp_path / "c", tensors, kit.config_4bit()), formats=FORMATS)
    for key in [*cases, "q.weight"]:
        plan = ct.read_plan(key, flexq.TargetSlice.whole(ct.entries[key].shape, "float32"))
        sources = ct.read_sources(plan)
        want = ct.decode(key, sources, plan, "float32")
        on_device = {k: paddle.to_tensor(v) for k, v in sources.items()}
        got = ct.apply(key, on_device, "float32")
        np.testing.assert_array_equal(kit.bits(got.numpy()), kit.bits(want))
        got16 = ct.apply(key, on_device, "bfloat16")
        np.testing.assert_array_equal(got16.view(paddle.uint16).numpy(), kit.bf16_bits(want))
