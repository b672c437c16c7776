"""The AWQ nibble order: the check vectors of notes/formats.md section 3."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flexq import TargetSlice
from flexq.formatkit import NumpyOps, PaddleOps
from flexq_int4_awq import AWQ_ORDER, pack_int4
from flexq_int4_awq.layout import AWQ_REVERSE, SEQUENTIAL, slots_for


def test_logical_zero_to_seven_packs_to_0x75316420() -> None:
    words = pack_int4(np.arange(8)[None, :], slots_for("gemm"))
    assert words.dtype == np.int32
    assert int(words[0, 0]) == 0x75316420


def test_fifteen_in_logical_column_7_packs_to_negative_int32_and_unpacks_to_15() -> None:
    codes = np.zeros((1, 8), dtype=np.uint8)
    codes[0, 7] = 15
    words = pack_int4(codes, slots_for("gemm"))
    assert int(words[0, 0]) == -268435456
    unpacked = NumpyOps().unpack(words, 4, AWQ_REVERSE, transposed=False)
    np.testing.assert_array_equal(unpacked, [[0, 0, 0, 0, 0, 0, 0, 15]])


def test_slot_order_is_autoawqs_order_map() -> None:
    assert AWQ_ORDER == (0, 2, 4, 6, 1, 3, 5, 7)
    assert AWQ_REVERSE == (0, 4, 1, 5, 2, 6, 3, 7)
    assert slots_for("gemv") == SEQUENTIAL


def test_gemv_words_are_sequential() -> None:
    words = pack_int4(np.arange(8)[None, :], slots_for("gemv"))
    assert int(words[0, 0]) == 0x76543210


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("version", ["gemm", "gemv"])
def test_unpack_inverts_pack_on_every_code(version: str, transposed: bool) -> None:
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 16, size=(5, 24))
    words = pack_int4(codes, slots_for(version))
    got = NumpyOps().unpack(words, 4, slots_for(version), transposed=transposed)
    np.testing.assert_array_equal(got, codes.T if transposed else codes)
    assert got.dtype == np.float32


@pytest.mark.parametrize("transposed", [False, True])
def test_paddle_unpack_matches_numpy_with_sign_bit_set(transposed: bool) -> None:
    import paddle

    rng = np.random.default_rng(4)
    words = rng.integers(-(2**31), 2**31, size=(6, 3), dtype=np.int64).astype(np.int32)
    words[0, 0] = -268435456
    want = NumpyOps().unpack(words, 4, AWQ_REVERSE, transposed)
    got = PaddleOps().unpack(paddle.to_tensor(words), 4, AWQ_REVERSE, transposed)
    np.testing.assert_array_equal(got.numpy(), want)
    assert want.max() == 15


def test_pack_rejects_codes_outside_four_bits() -> None:
    with pytest.raises(ValueError, match=r"0\.\.15"):
        pack_int4(np.full((1, 8), 16), slots_for("gemm"))
    with pytest.raises(ValueError, match="multiple of 8|of 8"):
        pack_int4(np.zeros((1, 7)), slots_for("gemm"))


def test_checkpoint_holding_the_check_vector_decodes_to_zero_through_seven(
    write_checkpoint: Any,
) -> None:
    import flexq

    # One input row, eight outputs, zero 0, scale 1: the logical weight column is 0..7.
    tensors = {
        "m.qweight": flexq.RawTensor.of(np.array([[0x75316420]], dtype=np.int32)),
        "m.qzeros": flexq.RawTensor.of(np.zeros((1, 1), dtype=np.int32)),
        "m.scales": flexq.RawTensor.of(np.ones((1, 8), dtype=np.float16)),
    }
    cfg = {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": -1}}
    ct = flexq.compose(write_checkpoint(tensors, cfg), formats=["int4-awq"])
    got = ct.load("m.weight", "float32")
    np.testing.assert_array_equal(got, np.arange(8, dtype=np.float32)[:, None])
    part = TargetSlice((8, 1), (3, 1), (5, 0), "float32")
    plan = ct.plan("m.weight", part)
    out = ct.decode("m.weight", ct.read_sources(plan), plan, "float32")
    np.testing.assert_array_equal(out, [[5.0], [6.0], [7.0]])
