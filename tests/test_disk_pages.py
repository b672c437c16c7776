"""Disk-level cost of reads: the page floor flexq reports, and reads sized to the runs.

The page floor of a set of byte ranges is the bytes of the distinct 4 KiB file pages
they touch. ``Checkpoint.pages_read_bytes`` and ``LoadReport.pages_read_bytes`` must
equal it exactly (computed here from the header's offsets, independently of the
reader), and the bytes flexq asks the kernel for may not exceed it: runs are read as
one span only where the gap between them holds no whole page. The measured cold
figure (page cache dropped) is the bench's (bench/cold_pages.py): tests may not drop
the page cache.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import paddle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

import flexq
from flexq.io import checkpoint

if TYPE_CHECKING:
    from flexq.io.header import TensorInfo

PAGE = 4096


def page_floor(ranges: list[tuple[str, int, int]]) -> int:
    """Bytes of the distinct pages of (file, start, stop) byte ranges: the oracle."""
    pages = {
        (f, p) for f, lo, hi in ranges if hi > lo for p in range(lo // PAGE, (hi - 1) // PAGE + 1)
    }
    return len(pages) * PAGE


def box_ranges(
    info: TensorInfo, itemsize: int, offset: tuple[int, ...], shape: tuple[int, ...]
) -> list[tuple[str, int, int]]:
    """The file byte ranges of a box, one per element run along the last dimension."""
    strides = [int(np.prod(info.shape[i + 1 :])) * itemsize for i in range(len(info.shape))]
    out = []
    for index in np.ndindex(*shape[:-1]):
        first = sum((o + i) * s for o, i, s in zip(offset, index, strides, strict=False))
        start = info.start + first + offset[-1] * itemsize
        out.append((info.file, start, start + shape[-1] * itemsize))
    return out


DTYPES = {"U8": np.uint8, "BF16": np.uint16, "F32": np.float32}


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_the_page_figure_of_any_box_is_its_page_floor_and_no_more_is_read(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(DTYPES)))
    shape = tuple(data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=3)))
    shape = (*shape[:-1], shape[-1] * data.draw(st.sampled_from([1, 64, 300])))
    values = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape).astype(DTYPES[name])
    # A small tensor first, so the big one's data does not start on a page boundary.
    path = flexq.save_checkpoint(
        tmp_path_factory.mktemp("c"),
        {
            "a": flexq.RawTensor("U8", np.ones(data.draw(st.integers(1, 5000)), np.uint8)),
            "t": flexq.RawTensor(name, values),
        },
    )
    offset = tuple(data.draw(st.integers(0, d - 1)) for d in shape)
    box = tuple(data.draw(st.integers(1, d - o)) for d, o in zip(shape, offset, strict=True))
    ck = flexq.Checkpoint(path)
    asked: list[int] = []
    real, band = os.preadv, checkpoint.BAND_BYTES

    def counted(fd: int, buffers: Any, at: int, flags: int = 0) -> int:
        asked.append(sum(b.nbytes for b in buffers))
        return real(fd, buffers, at, flags)

    # Hypothesis examples share the test's fixtures: patched by hand. A small band
    # buffer splits spans into several bands.
    os.preadv = counted
    checkpoint.BAND_BYTES = data.draw(st.sampled_from([PAGE, 3 * PAGE, band]))
    try:
        got = ck.read("t", offset, box)
    finally:
        os.preadv, checkpoint.BAND_BYTES = real, band
        ck.close()
    want = values[tuple(slice(o, o + n) for o, n in zip(offset, box, strict=True))]
    np.testing.assert_array_equal(got, want)
    floor = page_floor(box_ranges(ck.info("t"), values.itemsize, offset, box))
    assert ck.pages_read_bytes == floor
    assert ck.bytes_read == want.nbytes
    assert want.nbytes <= sum(asked) <= floor


def rows_and_wide() -> dict[str, flexq.RawTensor]:
    """Two float32 tensors: 4 KiB rows (a quarter of a row shares a page with its
    neighbours) and 32 KiB rows (a quarter spans two pages, and skips six)."""
    return {
        "model.w.weight": flexq.RawTensor.of(
            np.arange(64 * 1024, dtype=np.float32).reshape(64, 1024)
        ),
        "model.v.weight": flexq.RawTensor.of(
            np.arange(16 * 8192, dtype=np.float32).reshape(16, 8192)
        ),
    }


def shard(key: str, full: tuple[int, int], axis: int, part: int, parts: int) -> ShardedWeight:
    local = list(full)
    local[axis] //= parts
    offset = [0, 0]
    offset[axis] = part * local[axis]
    return ShardedWeight(key, paddle.zeros(local, "float32"), tuple(local), full, tuple(offset))


@pytest.mark.parametrize("axis", [0, 1], ids=["Shard(0)", "Shard(1)"])
@pytest.mark.parametrize("part", [0, 3])
def test_a_loads_page_figure_is_exactly_the_page_floor_of_its_slices(
    tmp_path: Path, axis: int, part: int
) -> None:
    tensors = rows_and_wide()
    path = flexq.save_checkpoint(tmp_path / "c", tensors)
    targets: dict[str, Any] = {k: shard(k, t.data.shape, axis, part, 4) for k, t in tensors.items()}
    report = flexq.load_state_dict(targets, path, engine="direct")
    ck = flexq.Checkpoint(path)
    ranges = []
    for key, target in targets.items():
        ranges += box_ranges(ck.info(key), 4, target.global_offset, target.local_shape)
        box = tuple(
            slice(o, o + n) for o, n in zip(target.global_offset, target.local_shape, strict=True)
        )
        np.testing.assert_array_equal(target.local_tensor.numpy(), tensors[key].data[box])
    ck.close()
    floor = page_floor(ranges)
    assert report.pages_read_bytes == floor
    assert report.bytes_read == report.planned_bytes == sum(hi - lo for _, lo, hi in ranges)
    if axis == 1:
        # Shard(1) of the 4 KiB rows touches a page or two per row, of the 32 KiB rows
        # two or three pages of eight: well below the whole tensors' pages.
        whole = page_floor(
            [
                (f, lo, hi)
                for f, lo, hi in (
                    ("model.safetensors", ck.info(k).start, ck.info(k).start + ck.info(k).nbytes)
                    for k in tensors
                )
            ]
        )
        assert floor < whole
    # /proc/self/io exists on Linux: the measured figure is a count, not None.
    assert isinstance(report.disk_read_bytes, int)
    assert report.disk_read_bytes >= 0


def test_the_flexcheckpoint_engine_reports_no_page_figure_of_its_own(tmp_path: Path) -> None:
    tensors = rows_and_wide()
    path = flexq.save_checkpoint(tmp_path / "c", tensors)
    targets = {k: paddle.zeros(list(t.data.shape), "float32") for k, t in tensors.items()}
    report = flexq.load_state_dict(targets, path, engine="flexcheckpoint")
    # Paddle's loader reads whole files itself: no page floor flexq could vouch for.
    assert report.pages_read_bytes is None
    assert report.bytes_read == sum(t.data.nbytes for t in tensors.values())
    for key, t in tensors.items():
        np.testing.assert_array_equal(targets[key].numpy(), t.data)
