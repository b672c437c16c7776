"""A GGUF model (one file or a split set) as a :class:`flexq.Checkpoint`.

For the format's ``flexq_open_checkpoint`` hook. Every GGUF tensor becomes one
header entry the core reads by box, exactly as a safetensors tensor: float and
integer types in their own dtype and numpy shape; a block type as ``U8`` of shape
``[..., blocks * bytes_per_block]``, whose rows are whole blocks along the last
numpy dimension, so a row range or a block-aligned column band of a quantized
tensor reads only those blocks' bytes. Each block-type tensor also has a blocks view
(:func:`blocks_view`): the same bytes as ``U8 [..., blocks, bytes_per_block]``, through
which a plan reads only the scale fields of its blocks for the checks before the first
write. Tensors transformers derives instead of loading (``rope_freqs``) are left out
of the inventory (``derived``; ``flexq inspect`` lists them). Data is read by the core's reader
(``preadv``, counted in ``bytes_read``), headers through a memory map
(:mod:`flexq_format_gguf.container`); nothing is written anywhere.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from flexq import Checkpoint
from flexq.errors import CheckpointError
from flexq.io.datafile import DataFile, Identity
from flexq.io.header import Header, TensorInfo
from flexq.io.pages import PageSet
from flexq_format_gguf.container import GGUFHeader, GGUFTensor, read_gguf_header
from flexq_format_gguf.files import SUFFIX as SUFFIX
from flexq_format_gguf.files import gguf_files as gguf_files

#: What a GGUF tensor's blocks view is called (no GGUF name has an ``@``).
BLOCKS_VIEW = "{}@blocks"


def blocks_view(name: str) -> str:
    """The key of the blocks view of block-type tensor ``name``."""
    return BLOCKS_VIEW.format(name)


class GGUFDataFile(DataFile):
    """One GGUF file, open from its header parse on: the core's reads and checks over it."""

    def __init__(self, name: str, path: Path) -> None:
        # DataFile's own __init__ parses a safetensors header: the rest of it is reused.
        self.name, self.path = name, path
        self._lock = threading.Lock()
        self._fh = self._open()
        try:
            self.identity = Identity.of(os.fstat(self._fh.fileno()))
            self.gguf: GGUFHeader = read_gguf_header(
                self._fh.fileno(), self.identity.size, str(path)
            )
        except BaseException:
            self._fh.close()
            raise
        self.header = Header(name, {}, {})


class GGUFCheckpoint(Checkpoint):
    """A GGUF model as a checkpoint: ``path`` is its (first) file.

    :ivar metadata: the first file's metadata key-values.
    :ivar gguf: tensor name -> its GGUF entry (ggml type, numpy shape), every tensor of
        the files.
    :ivar derived: the GGUF tensors that are no HF tensor
        (:data:`flexq_format_gguf.names.DERIVED`): not in ``tensors``.
    :ivar config: the HF config.json built from the metadata
        (:func:`flexq_format_gguf.names.hf_config`), {} for an unknown architecture.
    """

    def __init__(self, files: list[Path]) -> None:
        from flexq_format_gguf.names import hf_config  # names depend on the inventory

        # Checkpoint.__init__ reads a safetensors directory; these are its attributes.
        self.path = files[0]
        self._quant_file: dict[str, Any] = {}
        self._data: dict[str, DataFile] = {}
        self.gguf: dict[str, GGUFTensor] = {}
        self.derived: tuple[str, ...] = ()
        self.tensors: dict[str, TensorInfo] = {}
        try:
            for f in files:
                df = self._data[f.name] = GGUFDataFile(f.name, f)
                self._add(f.name, df.gguf)
            self.metadata = self._data_header(files[0].name).metadata
            _check_split(files, [self._data_header(f.name) for f in files])
        except BaseException:
            self.close()
            raise
        self.config = hf_config(self.metadata, self.gguf)
        self.bytes_read = 0
        self.bytes_read_by_file: Counter[str] = Counter()
        self._pages = PageSet()
        self._local = threading.local()

    def stored_dtype(self, key: str) -> str:
        """The ggml type of tensor ``key`` (``Q4_K``, ``F16``; ``Q4_K blocks view``)."""
        if key in self.gguf:
            return self.gguf[key].type.name
        name = key.removesuffix(blocks_view(""))
        if name != key and name in self.gguf:
            return f"{self.gguf[name].type.name} blocks view"
        return super().stored_dtype(key)

    @property
    def notes(self) -> tuple[str, ...]:
        """The metadata ``flexq inspect`` shows: version, files, and every key-value but
        the tokenizer's long lists (their lengths instead)."""
        header = self._data_header(self.path.name)
        lines = [f"GGUF v{header.version}, {len(self._data)} file(s), {len(self.gguf)} tensors"]
        if self.derived:
            derived = ", ".join(self.derived)
            lines.append(f"  derived from the config, not loaded (as transformers): {derived}")
        for key, value in self.metadata.items():
            shown = f"[{len(value)} items]" if isinstance(value, list) and len(value) > 8 else value
            lines.append(f"  {key} = {shown}")
        return tuple(lines)

    def _data_header(self, name: str) -> GGUFHeader:
        df = self._data[name]
        assert isinstance(df, GGUFDataFile)
        return df.gguf

    def _add(self, file: str, header: GGUFHeader) -> None:
        from flexq_format_gguf.names import DERIVED

        for name, t in header.tensors.items():
            if name in self.gguf:
                raise CheckpointError(f"{self.path}: tensor {name!r} is in two files of the set")
            self.gguf[name] = t
            if name in DERIVED:
                self.derived += (name,)
                continue
            if t.type.plain:
                info = TensorInfo(name, t.type.plain, t.shape, file, t.start, t.nbytes)
                self.tensors[name] = info
                continue
            blocks = (*t.shape[:-1], t.shape[-1] // t.type.block)
            shape = (*blocks[:-1], blocks[-1] * t.type.nbytes)
            self.tensors[name] = TensorInfo(name, "U8", shape, file, t.start, t.nbytes)
            view = blocks_view(name)
            self.tensors[view] = TensorInfo(
                view, "U8", (*blocks, t.type.nbytes), file, t.start, t.nbytes
            )


def _check_split(files: list[Path], headers: list[GGUFHeader]) -> None:
    """A split set's files agree on their count and number (llama.cpp's ``split.*`` keys)."""
    if len(files) == 1 and "split.count" not in headers[0].metadata:
        return
    for i, (f, h) in enumerate(zip(files, headers, strict=True)):
        count, no = h.metadata.get("split.count"), h.metadata.get("split.no")
        if count != len(files) or no != i:
            raise CheckpointError(
                f"{f}: its split.count/split.no are {count}/{no}, expected {len(files)}/{i} "
                "(a file of another split set?)"
            )
    total = headers[0].metadata.get("split.tensors.count")
    if total is not None and total != sum(len(h.tensors) for h in headers):
        raise CheckpointError(
            f"{files[0]}: split.tensors.count is {total}, the files hold "
            f"{sum(len(h.tensors) for h in headers)}"
        )
