"""Read-only access to one safetensors checkpoint directory.

For format plugins (which inspect the tensor inventory and config.json) and
for the load pipeline (which reads whole tensors or slices). Supports a single
``model.safetensors``, shards listed by a ``*.safetensors.index.json``, or a
directory of ``*.safetensors`` files, plus an optional ``config.json``.

Headers are parsed by :mod:`flexq.io.header`, so every dtype string works. Each
data file is opened once (:mod:`flexq.io.datafile`): its header and its data come
from the same descriptor, and a file that changed since is an error. Data is read
with ``preadv`` in runs sized to the slice (no memory map, no read-around), every
byte read is counted in :attr:`Checkpoint.bytes_read` and the pages the reads
touch in :attr:`Checkpoint.pages_read_bytes`. Nothing is ever written into the
directory.
"""

from __future__ import annotations

import math
import os
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from flexq.errors import CheckpointError
from flexq.io.datafile import DataFile
from flexq.io.dtypes import DType, byte_length, dtype
from flexq.io.header import TensorInfo, merge_headers
from flexq.io.hub import locate
from flexq.io.pages import PAGE, PageSet
from flexq.plan import box_inside

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Iterator, Sequence
    from pathlib import Path
    from types import TracebackType

CONFIG_NAME = "config.json"
#: Largest band read at once when a slice's runs share pages (a column band's rows):
#: the span is read whole into a buffer of this size, then its runs copied out.
BAND_BYTES = 8 << 20
QUANT_CONFIG_NAME = "quant_config.json"


class Checkpoint:
    """A safetensors checkpoint directory: tensor inventory, config, and reads.

    :param path: the checkpoint directory, a Hugging Face cache snapshot, or a
        hub repo id ``org/name[@revision]`` (see :mod:`flexq.io.hub`).
    :param skip: data files to leave out (for :func:`flexq.verify`, which reports
        missing and damaged shards and still checks the others).
    :raises CheckpointError: when the directory, an index, a header or
        config.json is malformed or points outside the directory (a cache
        snapshot's files may point into its own ``models--*`` tree).
    """

    #: Several threads may read one checkpoint (parallel parts of one box): the read
    #: counters and the page set change under this lock (one for every checkpoint, so a
    #: container class that builds its own state needs none of its own).
    _counting: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: str | os.PathLike[str], *, skip: Collection[str] = ()) -> None:
        located = locate(path)
        self.path = located.path
        self.config: dict[str, Any] = located.read_json(CONFIG_NAME)
        # Older AutoAWQ checkpoints keep their settings beside config.json.
        self._quant_file = located.read_json(QUANT_CONFIG_NAME)
        files = located.data_files(skip)
        #: data file name -> the file, open from here to :meth:`close`
        self._data: dict[str, DataFile] = {}
        try:
            for name, (file_path, _) in files.items():
                self._data[name] = DataFile(name, file_path)
            self.tensors: dict[str, TensorInfo] = merge_headers(
                {name: (df.header, files[name][1]) for name, df in self._data.items()},
                self.path,
            )
        except BaseException:
            self.close()
            raise
        #: bytes read out of the files by :meth:`read`, in total and per file.
        self.bytes_read = 0
        self.bytes_read_by_file: Counter[str] = Counter()
        self._pages = PageSet()
        self._local = threading.local()

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

    def stored_dtype(self, key: str) -> str:
        """The stored type of tensor ``key`` as ``flexq inspect`` shows it: the header's
        dtype; a container format's checkpoint names its own (GGUF's ``Q4_K``)."""
        return self.info(key).dtype

    @property
    def notes(self) -> tuple[str, ...]:
        """Lines about the container ``flexq inspect`` prints (GGUF: its metadata); none here."""
        return ()

    def box_bytes(self, key: str, shape: Sequence[int]) -> int:
        """Bytes a box of ``shape`` elements of tensor ``key`` occupies on disk."""
        return byte_length(self.info(key).dtype, tuple(shape)) or 0

    # -- reads ---------------------------------------------------------------
    @property
    def pages_read_bytes(self) -> int:
        """The page floor of every :meth:`read` so far: bytes of the distinct 4 KiB file
        pages their byte ranges touch (:mod:`flexq.io.pages`)."""
        return self._pages.bytes()

    def read(
        self,
        key: str,
        offset: Sequence[int] | None = None,
        shape: Sequence[int] | None = None,
        *,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Read tensor ``key`` (or its box ``offset`` + ``shape``) as a new numpy array,
        or into ``out``: a C-contiguous array of the box's storage shape whose items
        have the storage dtype's size (a target's own memory), which is returned.

        Offsets and shapes are in header elements. The array dtype is the
        storage dtype (:mod:`flexq.io.dtypes`): F8/F4 come back as uint8 bytes (F4
        with the last dimension halved), BF16 as uint16 bits. Only the box's own
        bytes are read (plus the few between two of its rows that share a page).

        :raises CheckpointError: when the box is out of bounds, or the file changed
            (was replaced, rewritten or truncated) since its header was read.
        """
        info, items, box, sd = self._locate(key, offset, shape)
        stored = [s.stop - s.start for s in box]
        if out is None:
            out = np.empty(stored, dtype=sd.numpy)
        elif (
            list(out.shape) != stored
            or out.dtype.itemsize != np.dtype(sd.numpy).itemsize
            or not out.flags.c_contiguous
            or not out.flags.writeable
        ):
            raise CheckpointError(
                f"{info.file}: tensor {key!r}: cannot read box {box} into a "
                f"{out.dtype} array of shape {out.shape} (needs a writeable C-contiguous "
                f"array of shape {tuple(stored)} with {np.dtype(sd.numpy).itemsize}-byte items)"
            )
        if out.nbytes:
            self._read_box(info, items, box, out)
        with self._counting:
            self.bytes_read += out.nbytes
            self.bytes_read_by_file[info.file] += out.nbytes
        return out

    def empty(
        self, key: str, offset: Sequence[int] | None = None, shape: Sequence[int] | None = None
    ) -> np.ndarray:
        """A new, uninitialised array :meth:`read` of the same box fills (``out=``): the box
        in storage items and storage dtype, for readers that fill it in parts.

        :raises CheckpointError: when the box is out of bounds.
        """
        _, _, box, sd = self._locate(key, offset, shape)
        return np.empty([s.stop - s.start for s in box], dtype=sd.numpy)

    def prefetch(
        self,
        key: str,
        offset: Sequence[int] | None = None,
        shape: Sequence[int] | None = None,
    ) -> None:
        """Have the kernel start fetching the pages a later :meth:`read` of the same box
        reads, and return at once (nothing is read into this process, nothing counted).

        For the load engine's read-ahead: queued while an earlier piece decodes, a cold
        read of this box then finds its pages in the page cache or on their way. Exactly
        the read's own page spans are asked for, never the pages around them.

        :raises CheckpointError: when the box is out of bounds.
        """
        info, items, box, sd = self._locate(key, offset, shape)
        if math.prod(s.stop - s.start for s in box):
            starts, length = _runs(info.start, items, box, sd.numpy.itemsize)
            self._data[info.file].prefetch(_span_ranges(starts, starts + length))

    def check_files(self, names: Iterable[str] | None = None) -> None:
        """Refuse when a data file (those named, or all) changed since it was opened:
        for readers that open the files by name themselves (Paddle's loader)."""
        for name in self._data if names is None else names:
            self._data[name].check()

    def reopen_path(self, name: str) -> Path:
        """A path that opens the very data file ``name`` this checkpoint opened
        (:meth:`flexq.io.datafile.DataFile.reopen_path`), for readers that open by name."""
        return self._data[name].reopen_path()

    def close(self) -> None:
        """Close the data files (arrays returned by :meth:`read` stay valid)."""
        for df in self._data.values():
            df.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------
    def _locate(
        self, key: str, offset: Sequence[int] | None, shape: Sequence[int] | None
    ) -> tuple[TensorInfo, tuple[int, ...], tuple[slice, ...], DType]:
        """Tensor ``key``'s header entry, its shape in storage items, the box in items and
        its storage dtype: what a read (or a prefetch) of the box works from."""
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
            return info, (info.nbytes,), (slice(0, info.nbytes),), sd
        items = self._item_shape(info.shape, sd.elems_per_item)
        return info, items, self._item_box(box, sd.elems_per_item), sd

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

    def _read_box(
        self, info: TensorInfo, items: tuple[int, ...], box: tuple[slice, ...], out: np.ndarray
    ) -> None:
        """Fill ``out`` with ``box`` of the tensor ``info`` (stored as ``items`` of
        ``out.itemsize`` bytes): every run of the box is read once, alone or in a band."""
        starts, length = _runs(info.start, items, box, out.itemsize)
        stops = starts + length
        rows = out.reshape(-1).view(np.uint8).reshape(len(starts), length)
        alone: list[tuple[int, list[memoryview]]] = []
        bands: list[tuple[int, int]] = []
        spans = _spans(starts, stops)
        for lo, hi in spans:
            while lo < hi:
                # A band: the runs whose span fits the band buffer (at least one run).
                top = lo + max(
                    1, int(np.searchsorted(stops[lo:hi], starts[lo] + BAND_BYTES, "right"))
                )
                if top - lo == 1:
                    alone.append((int(starts[lo]), [memoryview(rows[lo].data)]))
                else:
                    bands.append((lo, top))
                lo = top
        df = self._data[info.file]
        df.check()
        if len(alone) == 1 and not bands:
            # One contiguous run (a whole tensor, a band of rows): what the page cache
            # holds is copied at once, only the rest is prefetched and waited for.
            first, (buffer,) = alone[0]
            got = df.read_cached(first, buffer)
            alone = [(first + got, [buffer[got:]])] if got < buffer.nbytes else []
            spans_read = [(first + got, int(stops[-1]))] if alone else []
        else:
            spans_read = _span_ranges(starts, stops, spans)
        df.prefetch(spans_read)
        df.read_spans(alone)
        for lo, hi in bands:
            first, span = int(starts[lo]), int(stops[hi - 1] - starts[lo])
            band = self._band_buffer()[:span]
            df.read_spans([(first, [memoryview(band.data)])])
            _scatter(band, starts[lo:hi] - first, rows[lo:hi])
        with self._counting:
            for lo, hi in spans:  # counted once read
                self._pages.add(info.file, int(starts[lo]), int(stops[hi - 1]))

    def _band_buffer(self) -> np.ndarray:
        """This thread's band buffer (reads may come from several threads)."""
        buf: np.ndarray | None = getattr(self._local, "band", None)
        if buf is None:
            buf = self._local.band = np.empty(BAND_BYTES, np.uint8)
        return buf


def _spans(starts: np.ndarray, stops: np.ndarray) -> list[tuple[int, int]]:
    """The runs [starts, stops) grouped into spans, as (first, past-last) run indexes.

    Runs whose gap holds no whole page are one span (the gap's pages are read anyway);
    a new span starts where reading the gap would cost a page.
    """
    cut = np.flatnonzero(starts[1:] // PAGE > (stops[:-1] - 1) // PAGE + 1) + 1
    return list(zip([0, *cut.tolist()], [*cut.tolist(), len(starts)], strict=True))


def _span_ranges(
    starts: np.ndarray, stops: np.ndarray, spans: list[tuple[int, int]] | None = None
) -> list[tuple[int, int]]:
    """The byte ranges [start, stop) of the spans of runs [starts, stops)."""
    spans = _spans(starts, stops) if spans is None else spans
    return [(int(starts[lo]), int(stops[hi - 1])) for lo, hi in spans]


def _scatter(band: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> None:
    """Copy the runs at ``offsets`` of ``band`` into ``rows``, one strided copy per stretch
    of equally spaced runs (a whole band for a 2-D slice)."""
    length = rows.shape[1]
    gaps = np.diff(offsets)
    i = 0
    while i < len(offsets):
        j = i + 1
        if j < len(offsets):
            step = int(gaps[i])
            # the run of equal gaps from i on
            unequal = np.flatnonzero(gaps[i:] != step)
            j = i + 1 + (int(unequal[0]) if len(unequal) else len(gaps) - i)
        else:
            step = length
        view = np.lib.stride_tricks.as_strided(
            band[int(offsets[i]) :], shape=(j - i, length), strides=(step, 1), writeable=False
        )
        rows[i:j] = view
        i = j


def _runs(
    base: int, items: tuple[int, ...], box: tuple[slice, ...], size: int
) -> tuple[np.ndarray, int]:
    """The file offsets of the contiguous runs of ``box`` in a C-order tensor of ``items``
    (``size`` bytes each) stored from byte ``base``, in destination order, and their length.

    The dims after the last cut one are whole, so every index of the dims before it
    starts one run.
    """
    if not items:
        return np.array([base], dtype=np.int64), size
    cut = max(
        (i for i, (b, n) in enumerate(zip(box, items, strict=True)) if b != slice(0, n)), default=0
    )
    strides = [math.prod(items[i + 1 :]) * size for i in range(len(items))]
    starts = np.array(base + box[cut].start * strides[cut], dtype=np.int64)
    for i in range(cut):
        starts = np.add.outer(
            starts, np.arange(box[i].start, box[i].stop, dtype=np.int64) * strides[i]
        )
    return starts.reshape(-1), (box[cut].stop - box[cut].start) * strides[cut]
