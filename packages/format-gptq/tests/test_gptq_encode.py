"""The encoder writes the producers' layout, and its checkpoints decode to s * (q - z) exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexq import save_checkpoint
from flexq_gptq import pack_codes, quantization_config, quantize
from flexq_gptq.encode import group_index, pack_zeros, quantize_codes


@settings(max_examples=40, deadline=None)
@given(
    bits=st.sampled_from([2, 3, 4, 8]),
    sym=st.booleans(),
    v1=st.booleans(),
    act_order=st.booleans(),
    group=st.sampled_from([-1, 16, 32, 40]),
    seed=st.integers(0, 2**32 - 1),
)
def test_round_trip_decodes_to_the_encoders_own_codes_exactly(
    oracle: Any,
    tmp_path_factory: Any,
    bits: int,
    sym: bool,
    v1: bool,
    act_order: bool,
    group: int,
    seed: int,
) -> None:
    from flexq import compose

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((32, 96)) * 0.02).astype(np.float32)
    w[:, :8] = np.abs(w[:, :8])  # a zero point of 0 in asymmetric groups
    perm = rng.permutation(96) if act_order else None
    path = save_checkpoint(
        tmp_path_factory.mktemp("rt") / "c",
        quantize(w, bits, group, sym=sym, perm=perm, v1=v1, prefix="fc"),
        config={
            "quantization_config": quantization_config(
                bits, group, sym=sym, desc_act=act_order, v1=v1
            )
        },
    )
    g = 96 if group == -1 else group
    groups = group_index(96, group, perm)
    q, z, s = quantize_codes(w, bits, groups, -(-96 // g), sym)
    want = (q - z[groups].T).astype(np.float32) * s[groups].T.astype(np.float32)
    got = compose(path, ["gptq"]).load("fc.weight", "float32")
    oracle.same_bits(got, want)
    if not sym:
        # round to nearest on a grid whose zero point is rounded too: within one step
        step = s[groups].T.astype(np.float32)
        assert (np.abs(got - w) <= step * 1.01 + 1e-7).all()


def test_four_bit_codes_pack_in_order_lowest_nibble_first() -> None:
    codes = np.arange(8).reshape(8, 1)
    assert int(pack_codes(codes, 4, axis=0).view(np.uint32)[0, 0]) == 0x76543210
    assert int(pack_codes(codes.T, 4, axis=1).view(np.uint32)[0, 0]) == 0x76543210


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_v1_zeros_are_the_producers_shifted_sum_of_z_minus_one(bits: int) -> None:
    """auto-round's ``qlinear_torch_zp`` packs ``sum((z - 1) << bits*j)`` in int32: a zero
    point of 0 borrows from the next field, and so does the encoder."""
    rng = np.random.default_rng(bits)
    per = 32 // bits
    z = rng.integers(0, 1 << bits, size=(3, 4 * per))
    z[0, :3] = 0
    shifted = [
        sum((int(z[r, c * per + j]) - 1) << (bits * j) for j in range(per)) & 0xFFFFFFFF
        for r in range(3)
        for c in range(4)
    ]
    got = pack_zeros(z, bits, minus_one=True).view(np.uint32).reshape(-1)
    assert [int(x) for x in got] == shifted


def test_three_bit_v1_zeros_are_stored_field_by_field() -> None:
    z = np.zeros((1, 32), np.int64)
    z[0, 5] = 4
    stored = pack_zeros(z, 3, minus_one=True)
    np.testing.assert_array_equal(stored, pack_codes(np.where(z == 0, 7, z - 1), 3, axis=1))


def test_act_order_groups_follow_the_permutation() -> None:
    perm = np.array([4, 0, 5, 1, 6, 2, 7, 3])
    np.testing.assert_array_equal(group_index(8, 4, perm), [0, 0, 1, 1, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="permutation"):
        group_index(8, 4, np.array([0, 0, 1, 2, 3, 4, 5, 6]))


def test_quantization_config_is_what_autogptq_and_gptqmodel_write() -> None:
    assert quantization_config(4, 128) == {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 128,
        "desc_act": False,
        "sym": True,
        "damp_percent": 0.01,
        "true_sequential": True,
        "checkpoint_format": "gptq",
    }
    assert quantization_config(8, -1, v1=False)["checkpoint_format"] == "gptq_v2"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.zeros((32, 30), np.float32), 4, 32), "multiples of 8"),
        ((np.zeros((32, 48), np.float32), 3, 16), "multiples of 32"),
        ((np.zeros((32, 64), np.float32), 5, 32), "bits must be one of"),
        ((np.full((32, 64), np.inf, np.float32), 4, 32), "non-finite"),
        ((np.zeros(64, np.float32), 4, 32), "2-D"),
    ],
)
def test_encoder_refuses_what_the_layout_cannot_hold(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        quantize(*args)
