"""Parse and validate the header of one GGUF file (v2/v3, little-endian).

For :mod:`flexq_format_gguf.checkpoint`. A GGUF file is the magic ``GGUF``, a
uint32 version, uint64 tensor and key-value counts, the metadata key-values, the
tensor infos (name, dims in ggml order -- fastest first, the reverse of numpy's --,
ggml type, offset into the data section), padding to ``general.alignment``
(default 32) and the data section. The header is parsed from a read-only memory
map, so only the pages it spans are read; nothing from the file is trusted: every
length and count is checked against the file size before it is used, every
tensor's byte range against the data section and the others.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from flexq.errors import CheckpointError
from flexq_format_gguf.ggml import TYPES, UNSUPPORTED, GGMLType

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_RANK = 8
#: Scalar metadata value types: id -> struct code.
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file.

    :ivar shape: numpy order (ggml's dims reversed).
    :ivar start: absolute byte offset in the file.
    """

    name: str
    type: GGMLType
    shape: tuple[int, ...]
    start: int
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    """The parsed header of one GGUF file: metadata and tensors."""

    file: str
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor]


class _Cursor:
    """Reads little-endian values from the mapped header, refusing to run past its end."""

    def __init__(self, buf: mmap.mmap, file: str) -> None:
        self.buf, self.file, self.pos = buf, file, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise CheckpointError(
                f"{self.file}: GGUF header: {what} runs past the end of the file "
                f"({len(self.buf)} bytes); the file is truncated or not GGUF"
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, code: str, what: str) -> Any:
        return struct.unpack("<" + code, self.take(struct.calcsize(code), what))[0]

    def string(self, what: str) -> str:
        raw = self.take(self.scalar("Q", what), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.file}: GGUF header: {what} is not UTF-8") from None

    def value(self, kind: int, what: str) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind], what)
        if kind == _STRING:
            return self.string(what)
        if kind == _ARRAY:
            item, count = self.scalar("I", what), self.scalar("Q", what)
            if item in _SCALARS and item != 7:
                size = struct.calcsize(_SCALARS[item])
                # Numeric arrays (token scores, types) are one buffer, not a loop.
                raw = self.take(count * size, what)
                return np.frombuffer(raw, "<" + _SCALARS[item]).tolist()
            if count > len(self.buf):
                raise CheckpointError(f"{self.file}: GGUF header: {what} has {count} items")
            return [self.value(item, what) for _ in range(count)]
        raise CheckpointError(f"{self.file}: GGUF header: {what} has unknown value type {kind}")


def read_gguf_header(fileno: int, file_size: int, file: str) -> GGUFHeader:
    """Parse the header of the GGUF file open as ``fileno`` (``file_size`` bytes).

    :param file: file name for messages and :class:`GGUFTensor`.
    :raises CheckpointError: on anything malformed, truncated, or a ggml type flexq
        does not decode.
    """
    if file_size < 24:
        raise CheckpointError(f"{file}: {file_size} bytes is too short for a GGUF header")
    with mmap.mmap(fileno, 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf, file)
        if cur.take(4, "magic") != MAGIC:
            raise CheckpointError(f"{file}: not a GGUF file (no GGUF magic)")
        version = cur.scalar("I", "version")
        if version not in (2, 3):
            hint = " (big-endian files are not supported)" if version > 0xFFFF else ""
            raise CheckpointError(f"{file}: GGUF version {version} is not supported{hint}")
        n_tensors, n_kv = cur.scalar("Q", "tensor count"), cur.scalar("Q", "kv count")
        if n_tensors > file_size or n_kv > file_size:
            raise CheckpointError(f"{file}: GGUF header: counts {n_tensors}/{n_kv} are absurd")
        metadata: dict[str, Any] = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key {i}")
            metadata[key] = cur.value(cur.scalar("I", key), f"metadata {key!r}")
        infos = [_tensor_info(cur) for _ in range(n_tensors)]
        align = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if type(align) is not int or align <= 0 or align & (align - 1):
            raise CheckpointError(f"{file}: general.alignment {align!r} is not a power of two")
        data_start = -(-cur.pos // align) * align
    tensors = {}
    for name, shape, type_id, offset in infos:
        where = f"{file}: tensor {name!r}"
        if name in tensors:
            raise CheckpointError(f"{where} appears twice")
        gtype = TYPES.get(type_id)
        if gtype is None:
            known = UNSUPPORTED.get(type_id, f"type id {type_id}")
            raise CheckpointError(
                f"{where}: ggml type {known} is not decoded by flexq-format-gguf "
                "(it decodes F32, F16, BF16, Q4_0..Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS): "
                "requantize the model to one of those"
            )
        if shape and shape[-1] % gtype.block:
            raise CheckpointError(
                f"{where}: its last dimension {shape[-1]} is not a multiple of the "
                f"{gtype.name} block of {gtype.block}"
            )
        if offset % align:
            raise CheckpointError(f"{where}: offset {offset} is not aligned to {align}")
        nbytes = math.prod(shape) // gtype.block * gtype.nbytes
        start = data_start + offset
        if start + nbytes > file_size:
            raise CheckpointError(
                f"{where}: bytes [{start}, {start + nbytes}) lie past the end of the file "
                f"({file_size} bytes); the file is truncated (download it again)"
            )
        tensors[name] = GGUFTensor(name, gtype, shape, start, nbytes)
    spans = sorted((t.start, t.start + t.nbytes, t.name) for t in tensors.values() if t.nbytes)
    for (_, end_a, a), (start_b, _, b) in pairwise(spans):
        if start_b < end_a:
            raise CheckpointError(f"{file}: tensors {a!r} and {b!r} overlap")
    return GGUFHeader(file, version, metadata, tensors)


def _tensor_info(cur: _Cursor) -> tuple[str, tuple[int, ...], int, int]:
    name = cur.string("tensor name")
    rank = cur.scalar("I", f"tensor {name!r} rank")
    if rank > MAX_RANK:
        raise CheckpointError(f"{cur.file}: tensor {name!r} has rank {rank}")
    dims = [cur.scalar("Q", f"tensor {name!r} dims") for _ in range(rank)]
    type_id = cur.scalar("I", f"tensor {name!r} type")
    offset = cur.scalar("Q", f"tensor {name!r} offset")
    return name, tuple(reversed(dims)), type_id, offset
