"""The whole-weight decode equals the numpy oracle on random words, bits, groups and g_idx."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flexq import TargetSlice, compose


@st.composite
def linears(draw: st.DrawFn) -> dict[str, Any]:
    bits = draw(st.sampled_from([2, 3, 4, 8]))
    unit = 32 if bits == 3 else 32 // bits
    out_f = unit * draw(st.integers(1, 3 if bits == 3 else 6))
    in_f = unit * draw(st.integers(1, 3 if bits == 3 else 8))
    group = draw(st.sampled_from([-1, *sorted({1, 3, unit, max(1, in_f // 2), in_f})]))
    return {
        "bits": bits,
        "out_f": out_f,
        "in_f": in_f,
        "group": group,
        "v1": draw(st.booleans()),
        "g_idx": draw(st.sampled_from(["none", "trivial", "permuted", "random"])),
        "scale_dtype": draw(st.sampled_from(["F16", "BF16", "F32"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def linear_and_config(oracle: Any, case: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The random GPTQ linear ``case`` draws, and the config that describes it."""
    lin = oracle.random_gptq(
        np.random.default_rng(case["seed"]),
        case["bits"],
        case["out_f"],
        case["in_f"],
        case["group"],
        v1=case["v1"],
        g_idx=case["g_idx"],
        scale_dtype=case["scale_dtype"],
    )
    act_order = case["g_idx"] in ("permuted", "random")
    config = oracle.gptq_config(case["bits"], case["group"], v1=case["v1"], desc_act=act_order)
    return lin, config


@settings(max_examples=60, deadline=None)
@given(case=linears(), dtype=st.sampled_from(["float32", "bfloat16", "float16"]))
def test_whole_decode_equals_the_oracle(oracle: Any, case: dict[str, Any], dtype: str) -> None:
    lin, config = linear_and_config(oracle, case)
    with oracle.written({"fc": lin}, config) as ckpt:
        ct = compose(ckpt.path, ["gptq"])
        oracle.same_bits(ct.load("fc.weight", dtype), oracle.round_to(lin.reference(), dtype))


@settings(max_examples=30, deadline=None)
@given(case=linears())
def test_paddle_sources_decode_to_the_numpy_bits(oracle: Any, case: dict[str, Any]) -> None:
    from flexq.testing import source_to_paddle

    lin, config = linear_and_config(oracle, case)
    with oracle.written({"fc": lin}, config) as ckpt:
        ct = compose(ckpt.path, ["gptq"])
        out_f, in_f = lin.shape
        o0, i0 = out_f // 3, in_f // 4
        target = TargetSlice((out_f, in_f), (out_f - o0, in_f - i0), (o0, i0), "float32")
        plan = ct.plan("fc.weight", target)
        sources = ct.read_sources(plan)
        on_device = {
            k: source_to_paddle(v, ct.checkpoint.info(k).dtype) for k, v in sources.items()
        }
        numpy_result = ct.decode("fc.weight", sources, plan, "float32")
        paddle_result = ct.decode("fc.weight", on_device, plan, "float32")
        oracle.same_bits(paddle_result.numpy(), numpy_result)
        oracle.same_bits(numpy_result, lin.reference()[o0:, i0:])


def test_three_bit_codes_follow_autogptq_word_order(oracle: Any) -> None:
    """Codes 0..31 = 1,2,..: code 10 spans bits 30-31 of word 0 and bit 0 of word 1, code 21
    bit 31 of word 1 and bits 0-1 of word 2 (AutoGPTQ's pack loop)."""
    from flexq_gptq import pack_codes

    codes = (np.arange(32) % 8).reshape(32, 1)
    words = pack_codes(codes, 3, axis=0).view(np.uint32)[:, 0]
    expected = [0, 0, 0]
    for j in range(10):  # AutoGPTQ: word 0 |= c[j] << 3j, then c[10] << 30
        expected[0] |= int(codes[j, 0]) << (3 * j)
    expected[0] = (expected[0] | (int(codes[10, 0]) << 30)) & 0xFFFFFFFF
    expected[1] = (int(codes[10, 0]) >> 2) & 1
    for j in range(10):
        expected[1] |= int(codes[11 + j, 0]) << (3 * j + 1)
    expected[1] = (expected[1] | (int(codes[21, 0]) << 31)) & 0xFFFFFFFF
    expected[2] = (int(codes[21, 0]) >> 1) & 3
    for j in range(10):
        expected[2] |= int(codes[22 + j, 0]) << (3 * j + 2)
    assert [int(w) for w in words] == expected
    np.testing.assert_array_equal(oracle.unpack_stream(words.view(np.int32), 3), codes[:, 0])


def test_v1_zero_words_borrow_and_decode_every_zero_exactly(oracle: Any) -> None:
    """z = 0 in a v1 word: the producers' whole-word subtraction borrows (0 - 0x11111111 =
    0xEEEEEEEF, as auto-round 0.15.1's auto_gptq export writes for an all-positive group);
    adding the ones back gives z = 0 in every field, not 16 and 15."""
    from flexq_gptq.arrayops import gptq_ops_for
    from flexq_gptq.packing import Packing

    stored = np.array([[np.uint32(0xEEEEEEEF).view(np.int32)]], np.int32)
    offsets = Packing(4).v1_word_offsets()
    assert offsets == (0x11111111,)
    z = gptq_ops_for(stored).unpack(stored, 4, 1, offsets, 0)
    np.testing.assert_array_equal(z, np.zeros((1, 8), np.float32))
    np.testing.assert_array_equal(oracle.reference_zeros(stored, 4, True), np.zeros((1, 8)))
    # z = [0, 5, 1, 1, 1, 1, 1, 1]: the borrow lowers field 1 to 3, and comes back.
    v2 = sum(v << (4 * j) for j, v in enumerate([0, 5, 1, 1, 1, 1, 1, 1]))
    word = np.array([[np.uint32((v2 - 0x11111111) & 0xFFFFFFFF).view(np.int32)]], np.int32)
    got = gptq_ops_for(word).unpack(word, 4, 1, offsets, 0)
    np.testing.assert_array_equal(got[0], [0, 5, 1, 1, 1, 1, 1, 1])


def test_v1_three_bit_zeros_wrap_field_by_field(oracle: Any) -> None:
    from flexq_gptq import pack_codes

    stored = pack_codes(np.full((1, 32), 7), 3, axis=1)  # every field z - 1 = -1 mod 8
    lin = oracle.GptqTensors(
        3,
        -1,
        True,
        pack_codes(np.full((32, 32), 5), 3, axis=0),
        stored,
        np.ones((1, 32), np.float16),
    )
    with oracle.written({"fc": lin}, oracle.gptq_config(3, -1)) as ckpt:
        got = compose(ckpt.path, ["gptq"]).load("fc.weight", "float32")
    np.testing.assert_array_equal(got, np.full((32, 32), 5.0, np.float32))


@settings(max_examples=25, deadline=None)
@given(
    signs=st.lists(st.booleans(), min_size=8, max_size=8),
    v1=st.booleans(),
    dtype=st.sampled_from(["float32", "bfloat16", "float16"]),
)
def test_a_code_equal_to_its_zero_gives_the_zero_the_producer_gives(
    oracle: Any, signs: list[bool], v1: bool, dtype: str
) -> None:
    # auto-round's symmetric scales can be negative; its own dequantizing module
    # (auto_round_extension qlinear_torch_zp: scales * (weight - zeros)) then gives
    # -0.0 where q == z, and +0.0 under a positive scale: IEEE s * (q - z), never a
    # zero of a fixed sign (issue 25 measured flexq and that module equal, bit for
    # bit, on auto-round 0.15.1's exports: interop/).
    out_f, in_f, group = 8, 16, 8
    qweight = np.full((in_f // 8, out_f), 0x88888888, np.uint32).view(np.int32)  # q = 8
    zero_word = 0x77777777 if v1 else 0x88888888  # z = 8 (v1 stores z - 1)
    qzeros = np.full((in_f // group, out_f // 8), zero_word, np.uint32).view(np.int32)
    magnitude = np.linspace(0.5, 2.0, out_f, dtype=np.float16)
    scales = np.stack([np.where(signs, -magnitude, magnitude)] * (in_f // group))
    lin = oracle.GptqTensors(4, group, v1, qweight, qzeros, scales.astype(np.float16))
    with oracle.written({"fc": lin}, oracle.gptq_config(4, group, v1=v1)) as ckpt:
        got = compose(ckpt.path, ["gptq"]).load("fc.weight", dtype)
    want = lin.reference()
    assert not want.any()
    assert np.array_equal(np.signbit(want), np.broadcast_to(np.array(signs)[:, None], want.shape))
    oracle.same_bits(got, oracle.round_to(want, dtype))
