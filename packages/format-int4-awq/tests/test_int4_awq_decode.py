"""Bit-exact decoding of GEMM and GEMV checkpoints against the independent numpy oracle."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flexq import RawTensor, TargetSlice, compose
from flexq.testing import source_to_paddle

# (version, out, in, group_size): out != in everywhere, so a missing transpose fails.
CASES = [
    *(("gemm", *shape) for shape in [(24, 64, 16), (8, 96, 32), (40, 32, 8), (16, 48, -1)]),
    *(("gemv", *shape) for shape in [(24, 128, 32), (40, 192, 64), (8, 256, 128), (16, 64, -1)]),
]


@pytest.mark.parametrize(("version", "out_f", "in_f", "group"), CASES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_whole_weight_matches_oracle_bit_for_bit(
    version: str,
    out_f: int,
    in_f: int,
    group: int,
    dtype: str,
    oracle: Any,
    write_checkpoint: Any,
    rng: np.random.Generator,
) -> None:
    awq = oracle.random_awq(rng, version, out_f, in_f, group)
    path = write_checkpoint(
        awq.raw("model.layers.0.mlp.up_proj"), oracle.awq_config(version, group)
    )
    ct = compose(path, formats=["int4-awq"])
    entry = ct.entries["model.layers.0.mlp.up_proj.weight"]
    assert (entry.owner, entry.shape, entry.dtype) == ("int4-awq", (out_f, in_f), "float16")
    got = ct.load("model.layers.0.mlp.up_proj.weight", dtype)
    oracle.same_bits(got, oracle.round_to(awq.reference(), dtype))


@pytest.mark.parametrize(("version", "out_f", "in_f", "group"), CASES[::2])
def test_paddle_sources_give_the_same_bits_as_numpy_sources(
    version: str,
    out_f: int,
    in_f: int,
    group: int,
    oracle: Any,
    write_checkpoint: Any,
    rng: np.random.Generator,
) -> None:
    awq = oracle.random_awq(rng, version, out_f, in_f, group)
    path = write_checkpoint(awq.raw("fc"), oracle.awq_config(version, group))
    ct = compose(path, formats=["int4-awq"])
    target = TargetSlice((out_f, in_f), (out_f - 3, in_f - 5), (1, 3), "float32")
    plan = ct.plan("fc.weight", target)
    sources = ct.read_sources(plan)
    on_device = {k: source_to_paddle(v, ct.checkpoint.info(k).dtype) for k, v in sources.items()}
    want = ct.decode("fc.weight", sources, plan, "float32")
    got = ct.decode("fc.weight", on_device, plan, "float32")
    oracle.same_bits(got.numpy(), want)
    oracle.same_bits(want, awq.reference()[1 : out_f - 2, 3 : in_f - 2])


def test_upstream_apply_returns_a_paddle_tensor_of_the_asked_dtype(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    import paddle

    awq = oracle.random_awq(rng, "gemm", 16, 32, 16)
    ct = compose(write_checkpoint(awq.raw("fc"), oracle.awq_config("gemm", 16)), ["int4-awq"])
    plan = ct.read_plan("fc.weight", TargetSlice.whole((16, 32), "bfloat16"))
    sources = {
        k: source_to_paddle(v, ct.checkpoint.info(k).dtype)
        for k, v in ct.read_sources(plan).items()
    }
    out = ct.apply("fc.weight", sources, paddle.bfloat16)
    assert out.dtype == paddle.bfloat16
    oracle.same_bits(out.view(paddle.uint16).numpy(), oracle.round_to(awq.reference(), "bfloat16"))


def test_bias_and_unquantized_tensors_pass_through_unclaimed(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    awq = oracle.random_awq(rng, "gemm", 16, 32, 8)
    bias = rng.standard_normal(16).astype(np.float16)
    norm = rng.standard_normal(32).astype(np.float32)
    tensors = {**awq.raw("fc"), "fc.bias": RawTensor.of(bias), "norm.weight": RawTensor.of(norm)}
    ct = compose(write_checkpoint(tensors, oracle.awq_config("gemm", 8)), ["int4-awq"])
    assert ct.entries["fc.bias"].is_passthrough
    assert ct.entries["norm.weight"].is_passthrough
    assert set(ct.entries) == {"fc.weight", "fc.bias", "norm.weight"}
    np.testing.assert_array_equal(ct.load("fc.bias"), bias)


def test_components_in_different_shards_decode_the_same(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    awq = oracle.random_awq(rng, "gemv", 24, 64, 32)
    shards = {"fc.qweight": 0, "fc.qzeros": 1, "fc.scales": 2}
    path = write_checkpoint(awq.raw("fc"), oracle.awq_config("gemv", 32), shard_of=shards)
    ct = compose(path, ["int4-awq"])
    assert len({ct.checkpoint.info(k).file for k in shards}) == 3
    oracle.same_bits(ct.load("fc.weight", "float32"), awq.reference())


def test_bf16_scales_give_a_bfloat16_logical_weight(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    import ml_dtypes

    awq = oracle.random_awq(rng, "gemm", 8, 32, 16)
    bf16 = awq.scales.astype(np.float32).astype(ml_dtypes.bfloat16)
    tensors = {**awq.raw("fc"), "fc.scales": RawTensor("BF16", bf16.view(np.uint16))}
    ct = compose(write_checkpoint(tensors, oracle.awq_config("gemm", 16)), ["int4-awq"])
    assert ct.entries["fc.weight"].dtype == "bfloat16"
    want = oracle.reference_decode("gemm", awq.qweight, awq.qzeros, bf16.astype(np.float32), 16)
    oracle.same_bits(ct.load("fc.weight", "float32"), want)


def test_gemv_padding_columns_are_never_read_into_the_result(
    oracle: Any, write_checkpoint: Any, rng: np.random.Generator
) -> None:
    # g=32, in=64: 2 real groups, qzeros padded to 4 words = 32 group columns.
    awq = oracle.random_awq(rng, "gemv", 8, 64, 32)
    assert awq.qzeros.shape == (8, 4)
    assert awq.scales.shape == (8, 32)
    awq.scales[:, 2:] = np.float16(np.nan)  # poison the padding
    ct = compose(write_checkpoint(awq.raw("fc"), oracle.awq_config("gemv", 32)), ["int4-awq"])
    got = ct.load("fc.weight", "float32")
    assert np.isfinite(got).all()
    oracle.same_bits(got, awq.reference())
