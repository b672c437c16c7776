"""The package as installed: entry point, hooks, encoder round trips and the demo hook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq_ct_int import WeightScheme, quantization_config, quantize, save_ct_int_checkpoint
from flexq_ct_int import plugin as package_plugin


@pytest.mark.parametrize(
    "scheme",
    [
        dict(fmt="pack-quantized", bits=4, strategy="group", group_size=32),
        dict(fmt="pack-quantized", bits=4, strategy="group", group_size=32, symmetric=False),
        dict(fmt="pack-quantized", bits=8, strategy="channel", symmetric=False),
        dict(fmt="pack-quantized", bits=4, strategy="block", block=(16, 32), symmetric=False),
        dict(fmt="pack-quantized", bits=2, strategy="tensor", scale_dtype="F16"),
        dict(fmt="pack-quantized", bits=3, strategy="group", group_size=32, symmetric=False),
        dict(fmt="pack-quantized", bits=5, strategy="channel", dense=False),
        dict(fmt="int-quantized", bits=8, strategy="channel"),
        dict(fmt="int-quantized", bits=8, strategy="tensor", symmetric=False),
    ],
)
def test_encoder_round_trips_through_the_oracle_and_the_loader(
    tmp_path: Path, oracle: Any, scheme: dict[str, Any]
) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((48, 96)).astype(np.float32)
    path = save_ct_int_checkpoint(tmp_path, {"fc.weight": w}, WeightScheme(**scheme))
    got = flexq.compose(path, ["ct-int"]).load("fc.weight", "float32")
    # The loader decodes what the oracle decodes from the same tensors ...
    ckpt = flexq.Checkpoint(path)
    tensors = {
        k.removeprefix("fc."): flexq.RawTensor(ckpt.info(k).dtype, ckpt.read(k)) for k in ckpt
    }
    strategy = scheme["strategy"]
    block = {"tensor": (48, 96), "channel": (1, 96), "group": (1, scheme.get("group_size", 0)),
             "block": scheme.get("block", (1, 1))}[strategy]  # fmt: skip
    case = oracle.Case(scheme["fmt"], scheme["bits"], strategy, (48, 96), block,
                       scheme.get("symmetric", True), scheme.get("scale_dtype", "BF16"), None, tensors,
                       dense=scheme.get("dense", True))  # fmt: skip
    np.testing.assert_array_equal(got, oracle.reference_decode(case))
    # ... and that is the weight to within half a quantization step per element.
    err = np.abs(got - w)
    steps = (1 << scheme["bits"]) - 1
    assert err.max() <= (w.max() - w.min()) / steps


def test_encoder_writes_the_compressed_tensors_names_dtypes_and_shapes() -> None:
    w = np.linspace(-1, 1, 20 * 64, dtype=np.float32).reshape(20, 64)
    t = quantize(w, WeightScheme(bits=4, group_size=32, symmetric=False), prefix="m")
    assert {k: (v.dtype, v.data.shape) for k, v in t.items()} == {
        "m.weight_packed": ("I32", (20, 8)),
        "m.weight_scale": ("BF16", (20, 2)),
        "m.weight_shape": ("I64", (2,)),
        "m.weight_zero_point": ("I32", (3, 2)),
    }
    t8 = quantize(w, WeightScheme(fmt="int-quantized", bits=8, strategy="channel"), prefix="m")
    assert {k: (v.dtype, v.data.shape) for k, v in t8.items()} == {
        "m.weight": ("I8", (20, 64)),
        "m.weight_scale": ("BF16", (20, 1)),
    }
    gi = np.arange(64, dtype=np.int32)[::-1] // 32
    ta = quantize(w, WeightScheme(bits=4, group_size=32), g_idx=gi, prefix="m")
    assert ta["m.weight_g_idx"].dtype == "I32"
    qc = quantization_config(WeightScheme(bits=4, group_size=32), act_order=True)
    assert qc["config_groups"]["group_0"]["weights"]["actorder"] == "group"


def test_encoder_packs_like_the_oracles_bit_stream(oracle: Any) -> None:
    rng = np.random.default_rng(3)
    for bits in range(1, 9):
        codes = rng.integers(0, 1 << bits, (5, 77))
        np.testing.assert_array_equal(flexq_ct_int_pack(codes, bits), oracle.bitpack(codes, bits))
        np.testing.assert_array_equal(
            flexq_ct_int_pack(codes.T, bits, along_out=True), oracle.bitpack(codes, bits).T
        )


def flexq_ct_int_pack(codes: np.ndarray, bits: int, along_out: bool = False) -> np.ndarray:
    from flexq_ct_int import Packing, pack_cols, pack_rows

    return pack_cols(codes, Packing(bits)) if along_out else pack_rows(codes, Packing(bits))


def test_act_order_encoding_round_trips(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    w = rng.standard_normal((24, 64)).astype(np.float32)
    g_idx = np.empty(64, np.int32)
    g_idx[rng.permutation(64)] = np.arange(64) // 16
    scheme = WeightScheme(bits=4, group_size=16, symmetric=False)
    tensors = quantize(w, scheme, g_idx=g_idx, prefix="fc")
    config = {"quantization_config": quantization_config(scheme, act_order=True)}
    path = flexq.save_checkpoint(tmp_path, tensors, config=config)
    got = flexq.compose(path, ["ct-int"]).load("fc.weight", "float32")
    s = np.abs(w).max() / 7.5
    assert np.abs(got - w).max() <= s


def test_encode_hook_writes_a_loadable_checkpoint_within_its_tolerance(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    weights = {"a.weight": rng.standard_normal((64, 96)).astype(np.float32) * 0.05}
    tol = package_plugin.plugin.flexq_encode(tmp_path, weights, {})
    assert tol == package_plugin.MIN_LOGITS_COSINE
    ct = flexq.compose(tmp_path, ["ct-int"])
    got = ct.load("a.weight", "float32")
    w = weights["a.weight"]
    assert float(np.dot(got.ravel(), w.ravel()) / np.linalg.norm(got) / np.linalg.norm(w)) > 0.99
