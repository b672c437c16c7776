"""The safetensors header parser: valid files, every malformed case, and fuzzing."""

from __future__ import annotations

import contextlib
import io
import json
import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexq.errors import CheckpointError
from flexq.io.header import MAX_HEADER_BYTES, parse_header, read_header


def file_bytes(header: object, data: bytes = b"", raw: bytes | None = None) -> bytes:
    body = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body + data


def parse(blob: bytes) -> object:
    return read_header(io.BytesIO(blob), len(blob), "x.safetensors")


def test_every_dtype_string_is_accepted_with_its_byte_length() -> None:
    header = {
        "f8": {"dtype": "F8_E4M3", "shape": [2, 3], "data_offsets": [0, 6]},
        "e8": {"dtype": "F8_E8M0", "shape": [2], "data_offsets": [6, 8]},
        "f4": {"dtype": "F4", "shape": [2, 4], "data_offsets": [8, 12]},
        "bf": {"dtype": "BF16", "shape": [2], "data_offsets": [12, 16]},
        "i32": {"dtype": "I32", "shape": [1], "data_offsets": [16, 20]},
        "__metadata__": {"format": "pt"},
    }
    h = read_header(
        io.BytesIO(file_bytes(header, bytes(20))), 8 + len(json.dumps(header)) + 20, "x"
    )
    assert {k: (t.dtype, t.shape, t.nbytes) for k, t in h.tensors.items()} == {
        "f8": ("F8_E4M3", (2, 3), 6),
        "e8": ("F8_E8M0", (2,), 2),
        "f4": ("F4", (2, 4), 4),
        "bf": ("BF16", (2,), 4),
        "i32": ("I32", (1,), 4),
    }
    assert h.metadata == {"format": "pt"}
    assert h.tensors["i32"].start == 8 + len(json.dumps(header)) + 16


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x01\x00", "too short"),
        (struct.pack("<Q", 2**40) + b"{}", "exceeds"),
        (struct.pack("<Q", 1000) + b"{}", "past the end"),
        (file_bytes(None, raw=b"{not json"), "not valid JSON"),
        (file_bytes([1, 2]), "not a JSON object"),
        (
            file_bytes({"t": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}, b"x"),
            "unknown dtype",
        ),
        (file_bytes({"t": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}, b"x"), "shape"),
        (file_bytes({"t": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, b"x"), "outside"),
        (
            file_bytes({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, bytes(4)),
            "needs 8 bytes",
        ),
        (
            file_bytes({"t": {"dtype": "F4", "shape": [3], "data_offsets": [0, 1]}}, bytes(2)),
            "needs None",
        ),
        (
            file_bytes({"t": {"dtype": "U8", "shape": [1], "data_offsets": [1]}}, b"x"),
            "data_offsets",
        ),
        (
            file_bytes(
                {
                    "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                    "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},
                },
                bytes(4),
            ),
            "overlap",
        ),
        (file_bytes({"__metadata__": {"a": 1}}), "__metadata__"),
    ],
)
def test_malformed_headers_raise_checkpoint_error_naming_the_file(
    blob: bytes, message: str
) -> None:
    with pytest.raises(CheckpointError, match=message) as info:
        parse(blob)
    assert "x.safetensors" in str(info.value)


def test_absurd_header_numbers_allocate_nothing_sized_by_them() -> None:
    header = {"t": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 2**62]}}
    blob = file_bytes(header, bytes(16))
    tracemalloc.start()
    with pytest.raises(CheckpointError):
        parse(blob)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1_000_000


def test_header_cap_matches_the_safetensors_limit() -> None:
    assert MAX_HEADER_BYTES == 100_000_000


VALID = file_bytes(
    {
        "w": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [0, 4]},
        "s": {"dtype": "F32", "shape": [], "data_offsets": [4, 8]},
    },
    bytes(8),
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_ever_raise_checkpoint_error(blob: bytes) -> None:
    header = None
    with contextlib.suppress(CheckpointError):
        header = read_header(io.BytesIO(blob), len(blob), "x.safetensors")
    if header is not None:
        assert all(t.start + t.nbytes <= len(blob) for t in header.tensors.values())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=8))
def test_mutated_headers_only_ever_raise_checkpoint_error(edits: list[tuple[int, int]]) -> None:
    blob = bytearray(VALID)
    for pos, value in edits:
        blob[pos] = value
    tracemalloc.start()
    h = None
    with contextlib.suppress(CheckpointError):
        h = read_header(io.BytesIO(bytes(blob)), len(blob), "x.safetensors")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1_000_000
    if h is not None:
        for t in h.tensors.values():
            assert t.start + t.nbytes <= len(blob)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=5),
        st.fixed_dictionaries(
            {
                "dtype": st.sampled_from(["U8", "F32", "BF16", "F4", "F8_E8M0", "X"]),
                "shape": st.lists(st.integers(-2, 2**63), max_size=4),
                "data_offsets": st.lists(st.integers(-2, 2**63), max_size=3),
            }
        ),
        max_size=4,
    )
)
def test_structured_random_headers_only_ever_raise_checkpoint_error(
    header: dict[str, object],
) -> None:
    raw = json.dumps(header).encode()
    parsed = None
    with contextlib.suppress(CheckpointError):
        parsed = parse_header(raw, 8 + len(raw) + 64, "x.safetensors")
    if parsed is not None:
        assert set(parsed.tensors) == set(header)
        assert all(t.start + t.nbytes <= 8 + len(raw) + 64 for t in parsed.tensors.values())
