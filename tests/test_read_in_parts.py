"""A piece's large boxes are read in row bands on the worker threads (issue 30).

Read piece by piece, a box is copied out of the page cache (or waited for) while the
workers idle: the decode has not started. ``DirectSource`` cuts a box of more than
:data:`flexq.load.sources.READ_PART_BYTES` into row bands the workers read at once
(``preadv`` runs without the GIL). Pinned here: which calls read which rows on which
threads, that the bands are exactly the box, and that rows are cut only where stored
rows are the box's rows (packed F4 two-dimensional: yes; one-dimensional: no). The
time it saves is the bench's (``nox -s bench -- physical``).
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import paddle
import pytest

import flexq
from flexq import RawTensor, save_checkpoint
from flexq.errors import CheckpointError
from flexq.io.checkpoint import Checkpoint
from flexq.load import sources
from flexq_fp8 import save_fp8_checkpoint

from .conftest import LINEARS, assert_loaded_as_composed, weights

Read = tuple[str, tuple[int, ...], tuple[int, ...], str]  # key, offset, shape, thread


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> list[Read]:
    """Parts of 1 KiB on two workers (so 64x64 weights are cut), every read recorded."""
    monkeypatch.setattr(sources, "READ_PART_BYTES", 1024)
    monkeypatch.setenv("FLEXQ_THREADS", "2")
    reads: list[Read] = []
    real = Checkpoint.read

    def read(self: Checkpoint, key: str, offset: Any = None, shape: Any = None, **kw: Any) -> Any:
        whole = self.info(key).shape
        at = tuple(offset) if offset is not None else (0,) * len(whole)
        reads.append((key, at, tuple(shape if shape is not None else whole),
                      threading.current_thread().name))  # fmt: skip
        return real(self, key, offset, shape, **kw)

    monkeypatch.setattr(Checkpoint, "read", read)
    return reads


def bands_of(reads: list[Read], key: str) -> list[tuple[int, int, str]]:
    """(first row, rows, thread) of every read of ``key``'s whole width, by first row."""
    return sorted(
        (o[0], s[0], t) for k, o, s, t in reads if k == key and o[1:] == (0,) * len(o[1:])
    )


def test_a_piece_s_weight_is_read_in_row_bands_on_the_workers(
    tmp_path: Path, small_parts: list[Read]
) -> None:
    path = save_fp8_checkpoint(tmp_path / "fp8", weights(), layout="block", block_size=(32, 32))
    sd = {k: paddle.full(list(s), 7.0) for k, s in LINEARS.items()}
    flexq.load_state_dict(sd, path)
    assert_loaded_as_composed(sd, path)
    for key, (rows, cols) in LINEARS.items():
        # rows x cols codes (6 KiB at most) in parts of about 1 KiB: consecutive row bands
        # covering the rows once, read on the worker threads (the checks' first rows of the
        # smallest piece are a box of their own, read before).
        bands = [b for b in bands_of(small_parts, key) if b[2].startswith("flexq-numpy_")]
        parts = rows * cols // 1024
        step = -(-rows // parts)
        assert [(first, n) for first, n, _ in bands] == [
            (r, min(step, rows - r)) for r in range(0, rows, step)
        ]
        assert len(bands) >= 4
    # the scales (2 x 2 float32: 16 bytes) are one read each, on the load's thread
    scales = [r for r in small_parts if r[0].endswith("_scale_inv")]
    assert scales
    assert all(not t.startswith("flexq-numpy_") for *_, t in scales)


def test_stored_rows_are_cut_only_where_they_are_the_box_s_rows(
    tmp_path: Path, small_parts: list[Read]
) -> None:
    rng = np.random.default_rng(5)
    packed2 = rng.integers(0, 256, (128, 32), dtype=np.uint8)  # F4 [128, 64]
    packed1 = rng.integers(0, 256, 2048, dtype=np.uint8)  # F4 [4096]
    plain = rng.integers(0, 256, (64, 40), dtype=np.uint8)
    path = save_checkpoint(
        tmp_path / "raw",
        {"a": RawTensor("F4", packed2), "b": RawTensor("F4", packed1), "c": RawTensor.of(plain)},
    )
    ckpt = Checkpoint(path)
    # _read needs only the checkpoint of its composition.
    source = object.__new__(sources.DirectSource)
    source._ct = SimpleNamespace(checkpoint=ckpt)  # type: ignore[assignment]

    def firsts(key: str) -> list[int]:
        return sorted(o[0] for k, o, _, t in small_parts if k == key and t.startswith("flexq-"))

    # 96 rows of 32 bytes (64 F4 values) = 3 KiB: three parts of 32 rows.
    np.testing.assert_array_equal(source._read("a", ((16, 0), (96, 64))), packed2[16:112])
    assert firsts("a") == [16, 48, 80]
    # 4096 F4 values in 2 KiB: a cut by elements could split a byte's pair: one read.
    np.testing.assert_array_equal(source._read("b", ((0,), (4096,))), packed1)
    assert [(k, s) for k, _, s, _ in small_parts if k == "b"] == [("b", (4096,))]
    # Into a given array (a target's memory): 56 rows of 40 bytes, two parts of 28 rows.
    out = np.zeros((56, 40), np.uint8)
    assert source._read("c", ((8, 0), (56, 40)), out) is out
    np.testing.assert_array_equal(out, plain[8:])
    assert firsts("c") == [8, 36]
    ckpt.close()


def test_a_file_cut_while_its_bands_are_read_fails_the_load_naming_it(
    tmp_path: Path, small_parts: list[Read], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_fp8_checkpoint(tmp_path / "fp8", weights(), layout="block", block_size=(32, 32))
    (shard,) = path.glob("*.safetensors")
    real = Checkpoint.read
    cut: list[str] = []

    def read(self: Checkpoint, key: str, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith("flexq-numpy_") and not cut:
            cut.append(key)  # the first band a worker reads: the file loses its end
            os.truncate(shard, shard.stat().st_size // 2)
        return real(self, key, *args, **kwargs)

    monkeypatch.setattr(Checkpoint, "read", read)
    sd = {k: paddle.full(list(s), 7.0) for k, s in LINEARS.items()}
    with pytest.raises(CheckpointError, match=re.escape(shard.name)) as err:
        flexq.load_state_dict(sd, path)
    assert cut
    assert "reload" in str(err.value)
    assert "changed since it was opened" in str(err.value)
    # the bands of the checks' pieces fail before the first write
    assert all(bool((t.numpy() == 7.0).all()) for t in sd.values())
