"""Tensors bitsandbytes 0.50.2 quantized itself decode to its own dequantization, bit for bit.

``data/golden`` and ``data/expected.safetensors`` were written by
``data/make_golden.py`` with the real producer (torch 2.13.0 CPU): NF4 with
double quantization, FP4 with and without, blocks of 64 and 128, a row length
that is not a multiple of the block, and LLM.int8.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

import flexq

DATA = Path(__file__).parent / "data"
EXPECTED = load_file(DATA / "expected.safetensors")
KEYS = sorted({k.rsplit(".", 1)[0] for k in EXPECTED})


def test_every_quantized_tensor_is_claimed() -> None:
    ct = flexq.compose(DATA / "golden", formats=["bitsandbytes"])
    assert sorted(k for k, e in ct.entries.items() if e.owner == "bitsandbytes") == KEYS
    assert ct.entries["model.layers.0.mlp.down_proj.weight"].dtype == "bfloat16"


@pytest.mark.parametrize("key", KEYS)
def test_decodes_to_bnbs_own_dequantization(key: str, kit: Any) -> None:
    ct = flexq.compose(DATA / "golden", formats=["bitsandbytes"])
    got = ct.load(key, "float32")
    np.testing.assert_array_equal(kit.bits(got), kit.bits(EXPECTED[key + ".f32"]))
    if key + ".bf16" in EXPECTED:
        want16 = EXPECTED[key + ".bf16"].view(np.uint16)
        np.testing.assert_array_equal(ct.load(key, "bfloat16"), want16)
