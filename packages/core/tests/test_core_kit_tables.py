"""The kit's code tables: nibble pairs, pair items, banded block lookups and packed words."""

from __future__ import annotations

import numpy as np
import paddle
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flexq
from flexq.formatkit import (
    E2M1_PAIRS,
    E2M1_VALUES,
    NumpyOps,
    PaddleOps,
    code_table,
    float32_to_bfloat16_bits,
    gather_codes,
    lookup_blocks,
    lookup_scaled,
    nibble_block_boxes,
    nibble_pairs,
    pack_words,
    pair_items,
    parse_json_model,
    to_numpy,
    unpack_into,
)
from flexq.formatkit.words import decode_slot_groups, unpack_less_zeros, unpack_slots_into

BOOK = np.arange(16, dtype=np.float32) * np.float32(0.25) - np.float32(2.0)


def test_nibble_pairs_decode_the_low_nibble_first_unless_told() -> None:
    low = nibble_pairs(BOOK)
    high = nibble_pairs(BOOK, high_first=True)
    assert low.shape == high.shape == (256, 2)
    assert low.dtype == np.float32
    # byte 0x3A: low nibble 0xA, high nibble 0x3
    assert low[0x3A].tolist() == [BOOK[0xA], BOOK[0x3]]
    assert high[0x3A].tolist() == [BOOK[0x3], BOOK[0xA]]
    np.testing.assert_array_equal(nibble_pairs(E2M1_VALUES), E2M1_PAIRS)


def test_pair_items_gather_both_values_of_a_byte_in_one_item() -> None:
    pairs = nibble_pairs(BOOK)
    items = pair_items(pairs)
    assert items.shape == (256,)
    assert items.itemsize == 8
    codes = np.array([[0x00, 0xFF, 0x3A]], np.uint8)
    np.testing.assert_array_equal(items[codes].view(np.float32), pairs[codes].reshape(1, 6))


@settings(max_examples=30, deadline=None)
@given(
    lead=st.integers(0, 5),
    blocks=st.integers(0, 9),
    width=st.sampled_from([1, 4, 8]),
    seed=st.integers(0, 2**16),
)
def test_lookup_scaled_equals_lookup_then_block_multiply(
    lead: int, blocks: int, width: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    pairs = nibble_pairs(BOOK)
    codes = rng.integers(0, 256, (lead, blocks, width), dtype=np.uint8)
    scale = rng.standard_normal((lead, blocks, 1)).astype(np.float32)
    result = np.empty((lead, blocks, 2 * width), np.float32)
    items = result.view(np.uint64)
    assert lookup_scaled(pair_items(pairs), codes, items, scale) is items
    want = pairs[codes].reshape(lead, blocks, 2 * width) * scale
    np.testing.assert_array_equal(result, want)


@settings(max_examples=30, deadline=None)
@given(
    lead=st.integers(0, 3),
    blocks=st.integers(0, 9),
    width=st.sampled_from([1, 2, 4]),
    quads=st.booleans(),
    into=st.sampled_from(["new", "out", "rounded", "rounded-strided"]),
    seed=st.integers(0, 2**16),
)
def test_lookup_blocks_gives_every_output_the_lookup_then_block_multiply(
    lead: int, blocks: int, width: int, quads: bool, into: str, seed: int
) -> None:
    """Two or four values per code item, into a new array, the given float32 ``out``, a
    bfloat16 target's bits (rounded once), or (not C-contiguous) float32 for the core."""
    rng = np.random.default_rng(seed)
    pairs = nibble_pairs(BOOK)
    per = 4 if quads else 2
    if quads:  # a uint16 code: its two bytes' pairs, four values in one 16-byte item
        table = np.concatenate([pairs[np.arange(65536) & 0xFF], pairs[np.arange(65536) >> 8]], 1)
        items = np.ascontiguousarray(table).view(np.complex128).reshape(65536)
        codes = rng.integers(0, 65536, (lead, blocks, width), dtype=np.uint16)
        values = table[codes]
    else:
        items = pair_items(pairs)
        codes = rng.integers(0, 256, (lead, blocks, width), dtype=np.uint8)
        values = pairs[codes]
    scale = rng.standard_normal((lead, blocks, 1)).astype(np.float32)
    want = (values.reshape(lead, blocks, per * width) * scale).reshape(lead, blocks * per * width)
    out = np.empty((lead, blocks * per * width), np.float32) if into == "out" else None
    rounded = None
    if into == "rounded":
        rounded = np.empty((lead, blocks * per * width), np.uint16)
    elif into == "rounded-strided":
        rounded = np.empty((lead, 2 * blocks * per * width), np.uint16)[:, ::2]
    got = lookup_blocks(items, codes, scale, out, rounded)
    assert got.shape == want.shape
    assert out is None or got is out
    if rounded is not None and rounded.flags.c_contiguous:  # a strided 1 x 1 is contiguous
        assert got is rounded
        np.testing.assert_array_equal(got, float32_to_bfloat16_bits(want))
        return
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_lookup_scaled_makes_overflow_inf_without_a_warning() -> None:
    items = pair_items(nibble_pairs(np.full(16, 3e38, np.float32)))
    out = np.empty((1, 1, 2), np.float32)
    with np.errstate(all="raise"):
        lookup_scaled(
            items,
            np.zeros((1, 1, 1), np.uint8),
            out.view(np.uint64),
            np.full((1, 1, 1), 10, np.float32),
        )
    assert np.isinf(out).all()


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_code_table_lists_each_bytes_codes_low_bits_first(bits: int) -> None:
    table = code_table(bits)
    per = 8 // bits
    assert table.shape == (256, per)
    byte = 0b1011_0110
    want = [(byte >> (bits * j)) & ((1 << bits) - 1) for j in range(per)]
    assert table[byte].tolist() == want
    np.testing.assert_array_equal(code_table(bits, 3.0), table - 3)
    assert code_table(bits) is table  # built once


def test_code_table_refuses_widths_that_do_not_divide_a_byte() -> None:
    with pytest.raises(ValueError, match="not 3"):
        code_table(3)


@settings(max_examples=40, deadline=None)
@given(
    bits=st.sampled_from([1, 2, 4, 8]),
    rows=st.integers(0, 6),
    width=st.integers(0, 5),
    minus=st.sampled_from([0.0, 8.0]),
    seed=st.integers(0, 2**16),
)
def test_unpack_into_equals_the_kits_shift_unpack_and_paddles(
    bits: int, rows: int, width: int, minus: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    words = rng.integers(-(2**31), 2**31, (rows, width), dtype=np.int64).astype(np.int32)
    k = 32 // bits
    out = np.empty((rows, width * k), np.float32)
    unpack_into(words, bits, out, minus)
    want = NumpyOps().unpack(words, bits, range(k), False) - np.float32(minus)
    np.testing.assert_array_equal(out, want)
    if words.size:
        on_paddle = paddle.to_tensor(words)
        device = PaddleOps().unpack(on_paddle, bits, range(k), False).numpy()
        np.testing.assert_array_equal(out, device - np.float32(minus))


def stream_codes(words: np.ndarray, bits: int, positions: np.ndarray) -> np.ndarray:
    """The oracle: each row's little-endian bit stream, ``bits`` bits read from each position."""
    padded = np.concatenate([words, np.zeros((words.shape[0], 1), words.dtype)], axis=1)
    stream = np.unpackbits(np.ascontiguousarray(padded).view(np.uint8), axis=1, bitorder="little")
    codes = np.zeros((words.shape[0], positions.size), np.int64)
    for b in range(bits):
        codes |= stream[:, positions + b].astype(np.int64) << b
    return codes


@settings(max_examples=80, deadline=None)
@given(
    bits=st.integers(1, 8),
    padded=st.booleans(),
    rows=st.integers(1, 4),
    cols=st.integers(1, 70),
    skip=st.integers(0, 40),
    minus=st.sampled_from([0.0, 4.0]),
    as_int=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_unpack_into_reads_every_gptq_lineage_layout(
    bits: int,
    padded: bool,
    rows: int,
    cols: int,
    skip: int,
    minus: float,
    as_int: bool,
    seed: int,
) -> None:
    """Dense streams (codes crossing words: GPTQ 3 bits, compressed-tensors >= 0.18) and
    padded words (compressed-tensors 0.17), from the row's start or from a box of words
    that begins inside it, equal the bits read off the stream, as float32 or int32."""
    rng = np.random.default_rng(seed)
    per_word = 32 // bits if padded else None
    codes = rng.integers(0, 1 << bits, (rows, cols + skip), dtype=np.int64)
    words = pack_words(codes, bits, axis=1, per_word=per_word)
    if per_word is None or 8 % bits == 0:
        start = skip * bits
    else:
        start = skip // per_word * 32 + skip % per_word * bits
    first_word = start // 32
    box = np.ascontiguousarray(words[:, first_word:])
    out = np.full((rows, cols), -99, np.int32 if as_int else np.float32)
    unpack_into(box, bits, out, minus, first_bit=start - 32 * first_word, per_word=per_word)
    np.testing.assert_array_equal(out, (codes[:, skip:] - minus).astype(out.dtype))
    j = np.arange(skip, skip + cols)
    at = j * bits if per_word is None or 8 % bits == 0 else j // per_word * 32 + j % per_word * bits
    np.testing.assert_array_equal(stream_codes(words, bits, at), codes[:, skip:])
    np.testing.assert_array_equal(gather_codes(words, bits, at), codes[:, skip:])
    # The array operations' twins: numpy's is this unpacker, Paddle's gives the same bits.
    start_bit = start - 32 * first_word
    for ops, x in ((NumpyOps(), box), (PaddleOps(), paddle.to_tensor(box))):
        got = ops.unpack_codes(x, bits, cols, start_bit, per_word)
        np.testing.assert_array_equal(to_numpy(got), codes[:, skip:])


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(0, 5),
    units=st.integers(0, 4),
    minus=st.sampled_from([0.0, 4.0]),
    seed=st.integers(0, 2**16),
)
def test_unpack_into_reads_3_bit_streams_across_word_boundaries(
    rows: int, units: int, minus: float, seed: int
) -> None:
    # Random words (not only packed codes): every bit pattern, read off the stream.
    rng = np.random.default_rng(seed)
    words = rng.integers(-(2**31), 2**31, (rows, 3 * units), dtype=np.int64).astype(np.int32)
    want = stream_codes(words, 3, np.arange(32 * units) * 3) - minus
    out = np.empty((rows, 32 * units), np.float32)
    unpack_into(words, 3, out, minus)
    np.testing.assert_array_equal(out, want.astype(np.float32))
    # and the encoders' packer inverts it
    codes = rng.integers(0, 8, (rows, 32 * units))
    unpack_into(pack_words(codes, 3, axis=1), 3, out)
    np.testing.assert_array_equal(out, codes.astype(np.float32))


def test_to_numpy_gives_host_arrays_for_numpy_and_paddle() -> None:
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert to_numpy(x) is x
    np.testing.assert_array_equal(to_numpy(paddle.to_tensor(x)), x)


def test_nibble_blocks_cover_the_target_and_trim_inside_the_first_block() -> None:
    target = flexq.TargetSlice((4, 40), (2, 10), (1, 13), "float32")
    codes, scales, trim = nibble_block_boxes(target, 16, 40)
    # elements 13..22 lie in blocks 0 and 1: bytes 0..15, scales 0..1
    assert codes == ((1, 0), (2, 16))
    assert scales == ((1, 0), (2, 2))
    assert trim == 13


def test_nibble_blocks_read_only_the_bytes_of_a_partial_last_block() -> None:
    target = flexq.TargetSlice((3, 40), (3, 8), (0, 32), "float32")
    codes, scales, trim = nibble_block_boxes(target, 16, 40)
    assert codes == ((0, 16), (3, 4))
    assert scales == ((0, 2), (3, 1))
    assert trim == 0
    empty = flexq.TargetSlice((3, 40), (3, 0), (0, 40), "float32")
    assert nibble_block_boxes(empty, 16, 40)[1][1] == (3, 0)


class Blob(pydantic.BaseModel):
    size: int = pydantic.Field(gt=0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", r"^t.bin: tensor 'b': not valid JSON \("),
        (b"[1, 2]", r"^t.bin: tensor 'b': not a JSON object \(an array\)$"),
        (b'{"size": 0}', r"^t.bin: tensor 'b': field 'size': Input should be greater than 0$"),
    ],
)
def test_parse_json_model_names_where_and_the_field(raw: bytes, message: str) -> None:
    with pytest.raises(flexq.FormatError, match=message):
        parse_json_model(Blob, raw, "t.bin: tensor 'b'")


def test_parse_json_model_returns_the_model() -> None:
    assert parse_json_model(Blob, b'{"size": 3}', "here") == Blob(size=3)


@settings(max_examples=40, deadline=None)
@given(
    bits=st.integers(1, 8),
    rows=st.integers(0, 4),
    cols=st.integers(1, 40),
    axis=st.sampled_from([0, 1]),
    seed=st.integers(0, 2**16),
)
def test_pack_words_writes_one_dense_stream_that_unpacks_back(
    bits: int, rows: int, cols: int, axis: int, seed: int
) -> None:
    codes = np.random.default_rng(seed).integers(0, 1 << bits, (rows, cols), dtype=np.int64)
    packed = pack_words(codes if axis == 1 else codes.T, bits, axis=axis)
    words = packed if axis == 1 else packed.T
    assert words.dtype == np.int32
    assert words.shape == (rows, -(-cols * bits // 32))
    got = stream_codes(np.ascontiguousarray(words), bits, np.arange(cols) * bits)
    np.testing.assert_array_equal(got, codes)
    if 8 % bits == 0:
        out = np.empty((rows, words.shape[1] * (32 // bits)), np.float32)
        unpack_into(np.ascontiguousarray(words), bits, out)
        np.testing.assert_array_equal(out[:, :cols], codes)


def test_pack_words_pads_words_when_told_how_many_codes_each_holds() -> None:
    # 3-bit codes ten per word, the top two bits of each word unused
    codes = (np.arange(12) % 8).reshape(1, 12)
    words = pack_words(codes, 3, axis=1, per_word=10).view(np.uint32)
    assert words.shape == (1, 2)
    assert [(int(words[0, 0]) >> (3 * j)) & 7 for j in range(10)] == codes[0, :10].tolist()
    assert int(words[0, 0]) >> 30 == 0
    assert [(int(words[0, 1]) >> (3 * j)) & 7 for j in range(2)] == codes[0, 10:].tolist()


@pytest.mark.parametrize("bits", [3, 4, 8])
def test_unpack_into_int32_gives_the_codes_as_indexes(bits: int) -> None:
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 1 << bits, (3, 64))
    words = pack_words(codes, bits, axis=1)
    out = np.empty((3, 64), np.int32)
    unpack_into(words, bits, out, minus=1.0)
    np.testing.assert_array_equal(out, codes - 1)
    with pytest.raises(ValueError, match="float32 or int32"):
        unpack_into(words, bits, np.empty((3, 64), np.int16))


@settings(max_examples=40, deadline=None)
@given(
    cols=st.integers(0, 5),
    groups=st.integers(1, 3),
    width=st.sampled_from([1, 8, 32]),
    awq_order=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_decode_slot_groups_equals_the_shift_unpack_then_the_affine(
    cols: int, groups: int, width: int, awq_order: bool, seed: int
) -> None:
    """AutoAWQ's GEMM packing (codes of eight output rows per word, in AWQ's slot order
    or in order): the banded decoder and its unpacker give the bits of the whole-array
    shift unpack and ``(q - z) * s``, NaN and infinite scales included."""
    rng = np.random.default_rng(seed)
    slots = (0, 4, 1, 5, 2, 6, 3, 7) if awq_order else tuple(range(8))
    rows_in = groups * width
    words = rng.integers(-(2**31), 2**31, (rows_in, cols), dtype=np.int64).astype(np.int32)
    zero = rng.integers(0, 16, (8 * cols, groups)).astype(np.float32)
    scale = rng.standard_normal((8 * cols, groups)).astype(np.float16).astype(np.float32)
    if scale.size:
        scale.flat[0], scale.flat[-1] = np.inf, np.nan
    q = NumpyOps().unpack(words, 4, slots, True)
    codes = np.empty((8 * cols, rows_in), np.float32)
    unpack_slots_into(np.ascontiguousarray(words.T), 4, slots, codes)
    np.testing.assert_array_equal(codes, q)
    with np.errstate(invalid="ignore"):
        want = (q - np.repeat(zero, width, 1)) * np.repeat(scale, width, 1)
    out = np.full((8 * cols, rows_in), -1.0, np.float32)
    assert decode_slot_groups(words, 4, slots, zero, scale, out) is out
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    # zero points that are not codes come off the float32 codes: the same arithmetic
    half = zero + np.float32(0.5)
    with np.errstate(invalid="ignore"):
        want = (q - np.repeat(half, width, 1)) * np.repeat(scale, width, 1)
    decode_slot_groups(words, 4, slots, half, scale, out)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    with pytest.raises(ValueError, match="C-contiguous"):
        unpack_slots_into(np.ascontiguousarray(words.T), 4, slots, np.empty((1, 1), np.float32))


@pytest.mark.parametrize("band_codes", [1 << 15, 1 << 18])
def test_decode_slot_groups_of_many_bands_equals_a_shift_of_each_slot(
    band_codes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight 4-bit slots unpack through byte planes (the nibble path), band by band: the
    same bits as a shift and mask of each slot over whole words, then ``(q - z) * s``,
    in several bands (narrow ones transposed several at once), zero points 0 and 15
    included."""
    import flexq.numerics.bands as bands

    monkeypatch.setattr(bands, "_BAND_CODES", band_codes)
    rng = np.random.default_rng(7)
    slots = (0, 2, 4, 6, 1, 3, 5, 7)
    rows_in, cols, groups = 1024, 64, 8
    words = rng.integers(-(2**31), 2**31, (rows_in, cols), dtype=np.int64).astype(np.int32)
    zero = rng.integers(0, 16, (8 * cols, groups)).astype(np.float32)
    zero[0], zero[1] = 0, 15
    scale = rng.standard_normal((8 * cols, groups)).astype(np.float16).astype(np.float32)
    u = words.view(np.uint32).T
    q = np.stack([(u >> np.uint32(4 * s)) & np.uint32(15) for s in slots], axis=1)
    q = q.reshape(8 * cols, rows_in).astype(np.float32)
    width = rows_in // groups
    want = (q - np.repeat(zero, width, 1)) * np.repeat(scale, width, 1)
    out = np.empty((8 * cols, rows_in), np.float32)
    decode_slot_groups(words, 4, slots, zero, scale, out)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


@settings(max_examples=40, deadline=None)
@given(
    bits=st.sampled_from([2, 3, 4, 8]),
    rows=st.integers(0, 4),
    groups=st.integers(1, 3),
    units=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_unpack_less_zeros_takes_each_groups_zero_point_off_its_codes(
    bits: int, rows: int, groups: int, units: int, seed: int
) -> None:
    """Codes less their group's zero point (off the bytes for 3 and 4 bits, off the
    float32 codes otherwise) equal the unpacked codes less the repeated zero points."""
    rng = np.random.default_rng(seed)
    width = 32 * units  # whole 3-bit units and whole bytes at every width
    codes = rng.integers(0, 1 << bits, (rows, groups * width))
    zeros = rng.integers(0, 1 << bits, (rows, groups)).astype(np.float32)
    words = pack_words(codes, bits, axis=1)
    out = np.full(codes.shape, np.nan, np.float32)
    unpack_less_zeros(words, bits, out, zeros)
    want = (codes - np.repeat(zeros, width, axis=1)).astype(np.float32)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))  # +0.0 where equal
    # zero points that are not codes take the float32 path, with the same result
    unpack_less_zeros(words, bits, out, zeros - np.float32(0.5))
    np.testing.assert_array_equal(out, want + np.float32(0.5))
