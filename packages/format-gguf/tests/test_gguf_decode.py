"""The decoders against gguf-py's ``gguf.quants.dequantize``, bit for bit, on random blocks
(NaN and infinite scales included) and on random boxes read from a GGUF file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexq.formatkit import float32_to_bfloat16_bits
from flexq.plan import TargetSlice
from flexq.testing import same_bfloat16
from flexq_format_gguf.decode import DECODERS, decode_rows
from flexq_format_gguf.ggml import BY_NAME, TYPES

BLOCK_TYPES = list(DECODERS)
FLOAT_TYPES = ["F32", "F16", "BF16"]
Dequantize = Callable[[np.ndarray, str], np.ndarray]


def same_bits(ours: np.ndarray, ref: np.ndarray) -> None:
    """Equal float32 bits, NaN in the same places (NaN payloads aside)."""
    assert ours.dtype == np.float32
    assert ours.shape == ref.shape
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(ours), nan)
    np.testing.assert_array_equal(ours.view(np.uint32)[~nan], ref.view(np.uint32)[~nan])


def test_every_block_type_has_a_decoder_and_ggmls_sizes() -> None:
    for name, decoder in DECODERS.items():
        t = BY_NAME[name]
        assert (t.block, t.nbytes) == gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
        assert decoder.__name__ == name.lower()
    for t in TYPES.values():
        assert t.id == gguf.GGMLQuantizationType[t.name].value


@pytest.mark.parametrize("type_name", BLOCK_TYPES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_decoder_is_bit_exact_with_gguf_py_on_any_bytes(
    dequantize_ref: Dequantize, type_name: str, data: st.DataObject
) -> None:
    """Any bytes, at any address: the decoders read a band as uint64 lanes in place only
    when its bytes are whole, aligned lanes; bytes 1-7 past an aligned address, and a
    band whose size is no multiple of 8 (an odd number of Q4_0 blocks), go through the
    padded copy."""
    t = BY_NAME[type_name]
    n = data.draw(st.integers(1, 9), label="blocks")
    skew = data.draw(st.integers(0, 7), label="bytes past an aligned address")
    raw = np.frombuffer(
        data.draw(st.binary(min_size=n * t.nbytes, max_size=n * t.nbytes)), np.uint8
    )
    skewed = np.empty(raw.size + 8, np.uint8)[skew : skew + raw.size]
    skewed[...] = raw
    assert skewed.ctypes.data % 8 == skew  # numpy's allocations are 16-byte aligned
    with np.errstate(all="ignore"):
        got = decode_rows(type_name, skewed.reshape(1, -1))
        same_bits(got, dequantize_ref(raw.reshape(1, -1), type_name))


@pytest.mark.parametrize("type_name", [*BLOCK_TYPES, *FLOAT_TYPES])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_a_box_reads_only_its_blocks_and_equals_gguf_py(
    boxed: tuple[Path, dict[str, np.ndarray]], type_name: str, data: st.DataObject
) -> None:
    r0 = data.draw(st.integers(0, 5))
    r1 = data.draw(st.integers(r0 + 1, 6))
    c0 = data.draw(st.integers(0, 511))
    c1 = data.draw(st.integers(c0 + 1, 512))
    _box_equals_gguf_py(boxed, type_name, (r0, r1), (c0, c1))


@pytest.mark.parametrize("type_name", BLOCK_TYPES)
def test_whole_rows_are_decoded_in_place_and_equal_gguf_py(
    boxed: tuple[Path, dict[str, np.ndarray]], type_name: str
) -> None:
    _box_equals_gguf_py(boxed, type_name, (1, 5), (0, 512))


def _box_equals_gguf_py(
    boxed: tuple[Path, dict[str, np.ndarray]],
    type_name: str,
    rows: tuple[int, int],
    cols: tuple[int, int],
) -> None:
    """The box ``rows`` x ``cols`` of the [6, 512] tensor of ``type_name``, read and
    decoded as a load does, reads only its covering blocks and equals gguf-py."""
    from flexq.formatkit import BoxSources
    from flexq_format_gguf.checkpoint import GGUFCheckpoint
    from flexq_format_gguf.layout import GGUFLayout, Part, decode, local_plan

    path, ref = boxed
    key = f"t.{type_name}"
    (r0, r1), (c0, c1) = rows, cols
    with GGUFCheckpoint([path]) as opened:
        assert isinstance(opened, GGUFCheckpoint)
        ckpt = opened
        t = ckpt.gguf[key]
        layout = GGUFLayout(key, t.shape, "float32", (Part(key, t.shape, t.type),))
        target = TargetSlice((6, 512), (r1 - r0, c1 - c0), (r0, c0), "float32")
        plan = local_plan(layout, target)
        offset, shape = plan.source_slices[key]
        arrays = {key: ckpt.read(key, offset, shape)}
        with np.errstate(all="ignore"):
            got = decode(layout, BoxSources(ckpt, plan, arrays), None)
            # Into a bfloat16 target's memory (BoxSources.rounded_out): the same values,
            # rounded once by the format itself (whole rows band by band, others as cut).
            into = np.zeros(tuple(target.local_shape), np.uint16)
            rounded = decode(layout, BoxSources(ckpt, plan, arrays, into), None)
        blocks = -(-c1 // t.type.block) - c0 // t.type.block
        assert ckpt.bytes_read == (r1 - r0) * blocks * t.type.nbytes  # only the covering blocks
    same_bits(got, ref[key][r0:r1, c0:c1])
    assert rounded is into
    same_bfloat16(into, float32_to_bfloat16_bits(ref[key][r0:r1, c0:c1]))


@pytest.mark.parametrize("type_name", BLOCK_TYPES)
def test_many_bands_on_two_threads_into_out_equal_gguf_py(
    dequantize_ref: Dequantize, type_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three and a half bands of random bytes (NaN and infinite scales among them), split
    between two worker threads, decoded into an output written before: every value is
    gguf-py's, band edges included, and the output is the one given."""
    from flexq_format_gguf.decode import BAND_ELEMENTS

    monkeypatch.setenv("FLEXQ_THREADS", "2")
    t = BY_NAME[type_name]
    blocks = (7 * BAND_ELEMENTS // 2) // t.block
    rows = 7  # a row is a whole number of blocks: blocks // rows of them
    per_row = blocks // rows
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, (rows, per_row * t.nbytes), dtype=np.uint8)
    out = np.full((rows, per_row * t.block), np.nan, np.float32)
    into = np.zeros(out.shape, np.uint16)
    with np.errstate(all="ignore"):
        got = decode_rows(type_name, raw, out=out)
        rounded = decode_rows(type_name, raw, rounded=into)
        ref = dequantize_ref(raw, type_name)
    assert got is out
    same_bits(out, ref)
    # into a bfloat16 target: each band rounded while in cache, as the core rounds
    assert rounded is into
    same_bfloat16(into, float32_to_bfloat16_bits(ref))


def test_out_of_another_shape_or_layout_is_refused() -> None:
    raw = np.zeros((2, BY_NAME["Q4_0"].nbytes * 2), np.uint8)
    with pytest.raises(ValueError, match="C-contiguous float32 \\(2, 64\\)"):
        decode_rows("Q4_0", raw, out=np.empty((2, 128), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="float32"):
        decode_rows("Q4_0", raw, out=np.empty((2, 64), np.float64))
