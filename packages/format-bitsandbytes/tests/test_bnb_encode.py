"""The encoder: what it writes matches bitsandbytes 0.50.2 + transformers, and round trips."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flexq
from flexq.testing.strategies import examples
from flexq_bitsandbytes import quantization_config, quantize
from flexq_bitsandbytes.codebook import dynamic_map
from flexq_bitsandbytes.plugin import plugin

FORMATS = ["bitsandbytes"]
Build = Callable[..., Path]
KEY = "model.layers.0.self_attn.q_proj.weight"


def test_names_dtypes_shapes_and_blob_are_what_bnb_writes() -> None:
    # Recorded from bitsandbytes 0.50.2 + transformers 5.17 save_pretrained of a
    # [64, 64] bfloat16 q_proj with BitsAndBytesConfig(load_in_4bit, double quant).
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    out = quantize({KEY: w})
    layout = {k: (t.dtype, t.data.shape) for k, t in out.items()}
    assert layout == {
        KEY: ("U8", (2048, 1)),
        KEY + ".absmax": ("U8", (64,)),
        KEY + ".quant_map": ("F32", (16,)),
        KEY + ".nested_absmax": ("F32", (1,)),
        KEY + ".nested_quant_map": ("F32", (256,)),
        KEY + ".quant_state.bitsandbytes__nf4": (
            "U8",
            out[KEY + ".quant_state.bitsandbytes__nf4"].data.shape,
        ),
    }
    text = out[KEY + ".quant_state.bitsandbytes__nf4"].data.tobytes().decode()
    assert text.startswith(
        '{"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [64, 64], '
        '"nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": '
    )
    assert list(json.loads(text)) == [
        "quant_type", "blocksize", "dtype", "shape", "nested_blocksize", "nested_dtype", "nested_offset"
    ]  # fmt: skip
    plain = quantize({KEY: w}, mode="fp4", double_quant=False)
    assert {k: t.dtype for k, t in plain.items()} == {
        KEY: "U8",
        KEY + ".absmax": "F32",
        KEY + ".quant_map": "F32",
        KEY + ".quant_state.bitsandbytes__fp4": "U8",
    }
    int8 = quantize({KEY: w}, mode="int8")
    module = KEY.removesuffix(".weight")
    assert {k: (t.dtype, t.data.shape) for k, t in int8.items()} == {
        KEY: ("I8", (64, 64)),
        module + ".SCB": ("F32", (64,)),
        module + ".weight_format": ("U8", ()),
    }


def test_dynamic_map_is_bnbs() -> None:
    m = dynamic_map()
    assert m.shape == (256,)
    assert m.dtype == np.float32
    assert np.all(np.diff(m) >= 0)
    assert m[-1] == 1.0
    assert 0.0 in m
    # bnb 0.50.2's create_dynamic_map() starts -0.99296874, -0.9789063, -0.96484375 (float32).
    np.testing.assert_array_equal(
        m[:3], np.array([-0.99296874, -0.9789063, -0.96484375], dtype=np.float32)
    )


@examples(40)
@given(
    mode=st.sampled_from(["nf4", "fp4"]),
    double_quant=st.booleans(),
    blocksize=st.sampled_from([3, 32, 64, 128]),
    shape=st.tuples(st.integers(1, 20), st.integers(1, 50)),
    seed=st.integers(0, 2**32 - 1),
)
def test_four_bit_round_trip_is_within_half_a_code_step(
    mode: str,
    double_quant: bool,
    blocksize: int,
    shape: tuple[int, int],
    seed: int,
    build: Build,
    kit: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    w = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    path = build(
        tmp_path_factory.mktemp("c"),
        quantize({KEY: w}, mode=mode, double_quant=double_quant, blocksize=blocksize),  # type: ignore[arg-type]
        {"quantization_config": quantization_config(mode, double_quant=double_quant)},  # type: ignore[arg-type]
    )
    got = flexq.compose(path, formats=FORMATS).load(KEY, "float32")
    flat, err = w.reshape(-1), np.abs(got - w).reshape(-1)
    book = np.sort(kit.BOOKS[mode])
    gap = float(np.max(np.diff(book)))
    for b in range(0, flat.size, blocksize):
        amax = float(np.abs(flat[b : b + blocksize]).max())
        # Half the largest code gap, plus the 8-bit absmax coding error when nested.
        slack = 0.02 * amax + 0.01 if double_quant else 1e-6 * amax
        assert err[b : b + blocksize].max() <= gap / 2 * amax + slack


def test_int8_round_trip_is_within_half_a_step(tmp_path: Path, build: Build) -> None:
    w = np.random.default_rng(1).standard_normal((7, 33)).astype(np.float32)
    w[3] = 0.0
    path = build(tmp_path / "c", quantize({"m.weight": w}, mode="int8"))
    got = flexq.compose(path, formats=FORMATS).load("m.weight", "float32")
    step = np.abs(w).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(got - w) <= step * 0.5 + 1e-6)
    assert np.all(got[3] == 0)


def test_flexq_encode_writes_a_loadable_nf4_double_quant_checkpoint(tmp_path: Path) -> None:
    w = np.random.default_rng(2).standard_normal((16, 64)).astype(np.float32)
    norm = flexq.RawTensor("F32", np.ones(64, np.float32))
    cosine = plugin.flexq_encode(
        directory=tmp_path, weights={KEY: w}, others={"model.norm.weight": norm}
    )
    assert 0 < cosine <= 1
    ct = flexq.compose(tmp_path, formats=FORMATS)
    assert ct.entries[KEY].owner == "bitsandbytes"
    assert ct.entries["model.norm.weight"].is_passthrough
    assert KEY + ".nested_absmax" in ct.entries[KEY].sources
    qc = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert qc["bnb_4bit_quant_type"] == "nf4"
    assert qc["bnb_4bit_use_double_quant"] is True
    got = ct.load(KEY, "float32")
    assert np.corrcoef(got.reshape(-1), w.reshape(-1))[0, 1] > 0.98


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="mode"):
        quantize({KEY: np.ones((2, 2))}, mode="int3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="blocksize"):
        quantize({KEY: np.ones((2, 2))}, blocksize=0)
    with pytest.raises(ValueError, match=r"\[out, in\]"):
        quantize({KEY: np.ones(4)}, mode="int8")
