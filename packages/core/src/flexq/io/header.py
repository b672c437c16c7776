"""Parse and validate one safetensors header, for the checkpoint reader.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON,
then the data buffer. Nothing in the header is trusted: the length is capped,
every entry's dtype, shape and byte range are checked against each other and
against the file size, and byte ranges may not overlap. No allocation is sized
by a number from the file before it has been checked against the file size.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import BinaryIO

from flexq.errors import CheckpointError
from flexq.io.dtypes import DTYPES, byte_length
from flexq.io.jsonobj import json_object

#: Largest header accepted (the safetensors library uses the same 100 MB cap).
MAX_HEADER_BYTES = 100_000_000
#: More dimensions than any real tensor has; guards against absurd shapes.
MAX_RANK = 16


@dataclass(frozen=True)
class TensorInfo:
    """Where one physical tensor lives and what it holds.

    :ivar key: tensor name in the checkpoint.
    :ivar dtype: safetensors dtype string (``F8_E4M3``, ``BF16``, ``I32``, ...).
    :ivar shape: shape as the header states it (F4 counts nibbles).
    :ivar file: file name inside the checkpoint directory.
    :ivar start: absolute byte offset of the data in the file.
    :ivar nbytes: byte length of the data.
    """

    key: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    start: int
    nbytes: int


@dataclass(frozen=True)
class Header:
    """The validated header of one safetensors file."""

    file: str
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]


def merge_headers(
    headers: Mapping[str, tuple[Header, set[str] | None]], where: Path
) -> dict[str, TensorInfo]:
    """Every tensor of the data files of checkpoint ``where`` (file name -> (its header,
    the keys its index assigns to it, or None)): one key in one file, each file holding
    the keys its index assigns to it."""
    tensors: dict[str, TensorInfo] = {}
    for name, (header, indexed) in headers.items():
        for key, info in header.tensors.items():
            if key in tensors:
                raise CheckpointError(
                    f"{where}: tensor {key!r} is in both {tensors[key].file} and {name}"
                )
            tensors[key] = info
        missing = sorted((indexed or set()) - header.tensors.keys())
        if missing:
            raise CheckpointError(
                f"{where}: the index puts {missing[0]!r} in {name}, which has no such tensor"
            )
    return tensors


#: The advice for a file shorter than its own header says it is.
TRUNCATED = (
    "the file is truncated (shorter than its header says, e.g. an interrupted download): "
    "download it again"
)


def read_header(stream: BinaryIO, file_size: int, file: str) -> Header:
    """Read and validate the header of the safetensors file open as ``stream``.

    :param stream: binary file positioned anywhere; it is read from offset 0.
    :param file_size: size of the file in bytes.
    :param file: file name used in error messages and in :class:`TensorInfo`.
    :raises CheckpointError: on any malformed or inconsistent header.
    """
    if file_size < 8:
        raise CheckpointError(f"{file}: {file_size} bytes is too short for a safetensors header")
    stream.seek(0)
    (length,) = struct.unpack("<Q", stream.read(8))
    if length > MAX_HEADER_BYTES:
        raise CheckpointError(f"{file}: header length {length} exceeds {MAX_HEADER_BYTES}")
    if length > file_size - 8:
        raise CheckpointError(
            f"{file}: header length {length} runs past the end of the file ({file_size} bytes); "
            + TRUNCATED
        )
    raw = stream.read(length)
    return parse_header(raw, file_size, file)


def parse_header(raw: bytes, file_size: int, file: str) -> Header:
    """Validate the JSON header bytes ``raw`` of a file of ``file_size`` bytes."""
    try:
        doc = json_object(raw, MAX_HEADER_BYTES)
    except ValueError as exc:
        raise CheckpointError(f"{file}: header: {exc}") from None
    data_start = 8 + len(raw)
    data_len = file_size - data_start
    metadata = _metadata(doc.pop("__metadata__", None), file)
    tensors = {key: _entry(key, value, file, data_start, data_len) for key, value in doc.items()}
    _check_overlaps(tensors, file, data_start)
    return Header(file=file, tensors=tensors, metadata=metadata)


def _metadata(value: object, file: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise CheckpointError(f"{file}: __metadata__ must map strings to strings")
    return value


def _entry(key: str, value: object, file: str, data_start: int, data_len: int) -> TensorInfo:
    where = f"{file}: tensor {key!r}"
    if not isinstance(value, dict):
        raise CheckpointError(f"{where}: entry is not a JSON object")
    dtype, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise CheckpointError(f"{where}: unknown dtype {dtype!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_RANK
        or not all(type(d) is int and d >= 0 for d in shape)
    ):
        raise CheckpointError(f"{where}: shape {shape!r} is not a list of non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
    ):
        raise CheckpointError(f"{where}: data_offsets {offsets!r} is not a pair of integers")
    begin, end = offsets
    if not 0 <= begin <= end <= data_len:
        # A header that is sound but asks for bytes past the end is what a cut-off
        # download leaves: say so, and what to do, in plain words.
        cut = f"; {TRUNCATED}" if 0 <= begin <= end else ""
        raise CheckpointError(
            f"{where}: data_offsets [{begin}, {end}] lie outside the data buffer "
            f"of {data_len} bytes{cut}"
        )
    expected = byte_length(dtype, tuple(shape))
    if expected is None or expected != end - begin:
        raise CheckpointError(
            f"{where}: dtype {dtype} x shape {shape} needs {expected} bytes "
            f"but data_offsets span {end - begin}"
        )
    return TensorInfo(key, dtype, tuple(shape), file, data_start + begin, end - begin)


def _check_overlaps(tensors: dict[str, TensorInfo], file: str, data_start: int) -> None:
    spans = sorted((t.start, t.start + t.nbytes, t.key) for t in tensors.values() if t.nbytes)
    for (_, end_a, key_a), (start_b, _, key_b) in pairwise(spans):
        if start_b < end_a:
            raise CheckpointError(
                f"{file}: tensors {key_a!r} and {key_b!r} overlap at byte {start_b - data_start}"
            )
