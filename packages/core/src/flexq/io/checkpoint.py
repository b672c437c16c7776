"""Read-only access to one safetensors checkpoint directory.

For format plugins (which inspect the tensor inventory and config.json) and
for the load pipeline (which reads whole tensors or slices). Supports a single
``model.safetensors``, shards listed by a ``*.safetensors.index.json``, or a
directory of ``*.safetensors`` files, plus an optional ``config.json``.

Headers are parsed by :mod:`flexq.io.header`, so every dtype string works; data is
read through read-only memory maps, touching only the bytes a slice needs, and
every byte copied out is counted in :attr:`Checkpoint.bytes_read`. Nothing is
ever written into the directory.
"""

from __future__ import annotations

import mmap
import os
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.errors import CheckpointError
from flexq.io.dtypes import byte_length, dtype
from flexq.io.header import TensorInfo, read_headers
from flexq.io.hub import locate
from flexq.plan import box_inside

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from types import TracebackType

CONFIG_NAME = "config.json"
QUANT_CONFIG_NAME = "quant_config.json"


class Checkpoint:
    """A safetensors checkpoint directory: tensor inventory, config, and reads.

    :param path: the checkpoint directory, a Hugging Face cache snapshot, or a
        hub repo id ``org/name[@revision]`` (see :mod:`flexq.io.hub`).
    :raises CheckpointError: when the directory, an index, a header or
        config.json is malformed or points outside the directory (a cache
        snapshot's files may point into its own ``models--*`` tree).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        files = locate(path)
        self.path = files.path
        self.config: dict[str, Any] = files.read_json(CONFIG_NAME)
        # Older AutoAWQ checkpoints keep their settings beside config.json.
        self._quant_file = files.read_json(QUANT_CONFIG_NAME)
        #: data file name -> its checked path (and the keys its index assigns to it)
        self._files = files.data_files()
        self.tensors: dict[str, TensorInfo] = read_headers(self._files, self.path)
        #: bytes copied out of the files by :meth:`read`, in total and per file.
        self.bytes_read = 0
        self.bytes_read_by_file: Counter[str] = Counter()
        self._maps: dict[str, mmap.mmap] = {}
        #: files whose map :meth:`read` returned views of (see :meth:`close`)
        self._viewed: set[str] = set()

    # -- inventory -----------------------------------------------------------
    @property
    def quantization_config(self) -> dict[str, Any]:
        """``config.json``'s ``quantization_config`` (or ``compression_config``), else
        ``quant_config.json`` (older AutoAWQ checkpoints), else {}."""
        for name in ("quantization_config", "compression_config"):
            value = self.config.get(name)
            if isinstance(value, dict):
                return value
        return self._quant_file

    def __contains__(self, key: object) -> bool:
        return key in self.tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def info(self, key: str) -> TensorInfo:
        """The header entry of physical tensor ``key``."""
        try:
            return self.tensors[key]
        except KeyError:
            raise CheckpointError(f"{self.path}: no tensor named {key!r}") from None

    def box_bytes(self, key: str, shape: Sequence[int]) -> int:
        """Bytes a box of ``shape`` elements of tensor ``key`` occupies on disk."""
        return byte_length(self.info(key).dtype, tuple(shape)) or 0

    # -- reads ---------------------------------------------------------------
    def read(
        self,
        key: str,
        offset: Sequence[int] | None = None,
        shape: Sequence[int] | None = None,
        *,
        copy: bool = True,
    ) -> np.ndarray:
        """Read tensor ``key`` (or its box ``offset`` + ``shape``) as a numpy array.

        Offsets and shapes are in header elements. The array dtype is the
        storage dtype (:mod:`flexq.io.dtypes`): F8/F4 come back as uint8 bytes (F4
        with the last dimension halved), BF16 as uint16 bits.

        :param copy: False returns a read-only view of the file's pages when the
            box is contiguous in the file (rows of a tensor), so a decoder reads
            the page cache directly instead of a fresh copy; other boxes are
            still copied. A view keeps its file mapped until it is freed.
        """
        info = self.info(key)
        full = info.shape
        offset = tuple(offset) if offset is not None else (0,) * len(full)
        shape = tuple(shape) if shape is not None else tuple(full)
        box = self._check_box(info, offset, shape)
        sd = dtype(info.dtype)
        if (sd.bits * sd.elems_per_item) % 8:
            # F6 packs elements across byte boundaries: only whole reads are possible.
            if box != tuple(slice(0, d) for d in full):
                raise CheckpointError(f"{info.file}: tensor {key!r}: {info.dtype} cannot be sliced")
            items: tuple[int, ...] = (info.nbytes,)
            box = (slice(0, info.nbytes),)
        else:
            items = self._item_shape(info.shape, sd.elems_per_item)
            box = self._item_box(box, sd.elems_per_item)
        if info.nbytes == 0:
            return np.zeros([s.stop - s.start for s in box], dtype=sd.numpy)
        whole = np.ndarray(items, dtype=sd.numpy, buffer=self._map(info.file), offset=info.start)
        part = whole[box]
        if not copy and part.flags.c_contiguous:
            self._viewed.add(info.file)
            out = part
        else:
            out = np.array(part, copy=True)
        self.bytes_read += out.nbytes
        self.bytes_read_by_file[info.file] += out.nbytes
        return out

    def unmap_pages(self) -> None:
        """Drop the file pages mapped so far from this process's memory.

        They stay in the kernel's page cache, and views returned by :meth:`read`
        stay valid (a later access maps the page again), so a long load's
        resident memory does not grow with the checkpoint it has read.
        """
        if not hasattr(mmap, "MADV_DONTNEED"):
            return  # no madvise on this platform (Windows): pages stay mapped
        for m in self._maps.values():
            m.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        """Release the memory maps (arrays returned by :meth:`read` stay valid).

        A map :meth:`read` handed views of is only let go: numpy keeps the map
        object alive, not an export of it, so closing it would leave those views
        pointing at unmapped memory. It is unmapped when the last view is freed.
        """
        for file, m in self._maps.items():
            if file not in self._viewed:
                m.close()
        self._maps.clear()
        self._viewed.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------
    def _check_box(
        self, info: TensorInfo, offset: tuple[int, ...], shape: tuple[int, ...]
    ) -> tuple[slice, ...]:
        if len(offset) != len(info.shape) or len(shape) != len(info.shape):
            raise CheckpointError(
                f"{info.file}: tensor {info.key!r} has rank {len(info.shape)}, "
                f"asked for offset {offset} shape {shape}"
            )
        if not box_inside(offset, shape, info.shape):
            raise CheckpointError(
                f"{info.file}: tensor {info.key!r} of shape {info.shape}: "
                f"slice offset {offset} shape {shape} is out of bounds"
            )
        return tuple(slice(o, o + s) for o, s in zip(offset, shape, strict=True))

    @staticmethod
    def _item_shape(shape: tuple[int, ...], per_item: int) -> tuple[int, ...]:
        if per_item == 1 or not shape:
            return shape
        return (*shape[:-1], shape[-1] // per_item)

    def _item_box(self, box: tuple[slice, ...], per_item: int) -> tuple[slice, ...]:
        if per_item == 1 or not box:
            return box
        last = box[-1]
        if last.start % per_item or last.stop % per_item:
            raise CheckpointError(
                f"{self.path}: a packed slice must start and end on a byte boundary, "
                f"got [{last.start}, {last.stop})"
            )
        return (*box[:-1], slice(last.start // per_item, last.stop // per_item))

    def _map(self, file: str) -> mmap.mmap:
        if file not in self._maps:
            try:
                with open(self._files[file][0], "rb") as fh:
                    self._maps[file] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except OSError as exc:
                raise CheckpointError(f"{self.path}: cannot read {file!r} ({exc})") from None
        return self._maps[file]
