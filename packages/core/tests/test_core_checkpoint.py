"""The checkpoint directory reader: inventory, slices, byte counting, and unsafe directories."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flexq
from flexq.errors import CheckpointError

from .conftest import snapshot

if TYPE_CHECKING:
    from pathlib import Path


def make(tmp_path: Path, **kwargs: object) -> Path:
    tensors = {
        "w": flexq.RawTensor("F8_E4M3", np.arange(60, dtype=np.uint8).reshape(6, 10)),
        "e": flexq.RawTensor("F8_E8M0", np.arange(5, dtype=np.uint8)),
        "p": flexq.RawTensor("F4", np.arange(12, dtype=np.uint8).reshape(3, 4)),
        "b": flexq.RawTensor("BF16", np.arange(6, dtype=np.uint16).reshape(2, 3)),
        "i": flexq.RawTensor.of(np.arange(4, dtype=np.int32)),
    }
    return flexq.save_checkpoint(tmp_path / "c", tensors, **kwargs)  # type: ignore[arg-type]


def test_inventory_and_whole_reads_in_storage_dtypes(tmp_path: Path) -> None:
    ck = flexq.Checkpoint(make(tmp_path, config={"quantization_config": {"quant_method": "fp8"}}))
    assert ck.info("p").shape == (3, 8)  # F4 headers count nibbles
    assert ck.read("w").dtype == np.uint8
    np.testing.assert_array_equal(ck.read("p"), np.arange(12, dtype=np.uint8).reshape(3, 4))
    np.testing.assert_array_equal(ck.read("b"), np.arange(6, dtype=np.uint16).reshape(2, 3))
    np.testing.assert_array_equal(ck.read("i"), np.arange(4, dtype=np.int32))
    assert ck.quantization_config == {"quant_method": "fp8"}
    assert ck.bytes_read == 60 + 12 + 12 + 16


def test_slices_read_only_the_bytes_they_need(tmp_path: Path) -> None:
    ck = flexq.Checkpoint(make(tmp_path))
    np.testing.assert_array_equal(
        ck.read("w", (1, 2), (3, 4)), np.arange(60, dtype=np.uint8).reshape(6, 10)[1:4, 2:6]
    )
    assert ck.bytes_read == 12
    np.testing.assert_array_equal(
        ck.read("p", (1, 2), (2, 4)), np.arange(12).reshape(3, 4)[1:3, 1:3]
    )
    assert ck.bytes_read == 16
    assert sum(ck.bytes_read_by_file.values()) == 16


def test_reads_are_owned_arrays_that_outlive_close(tmp_path: Path) -> None:
    ck = flexq.Checkpoint(make(tmp_path))
    whole = np.arange(60, dtype=np.uint8).reshape(6, 10)
    rows = ck.read("w", (2, 0), (3, 10))  # rows: one run of the file
    cols = ck.read("w", (0, 2), (6, 3))  # columns: six runs, read as one span
    assert rows.flags.owndata
    assert rows.flags.writeable
    assert ck.bytes_read == 30 + 18
    ck.close()
    np.testing.assert_array_equal(rows, whole[2:5])
    np.testing.assert_array_equal(cols, whole[:, 2:5])
    # A closed checkpoint reads again (the file reopened, checked to be the same one).
    np.testing.assert_array_equal(ck.read("w", (2, 0), (3, 10)), whole[2:5])


@pytest.mark.parametrize(
    ("key", "offset", "shape", "message"),
    [
        ("w", (5, 0), (2, 10), "out of bounds"),
        ("w", (0,), (1,), "rank"),
        ("p", (0, 1), (1, 2), "byte boundary"),
        ("nope", None, None, "no tensor named"),
    ],
)
def test_bad_slices_are_checkpoint_errors(
    tmp_path: Path,
    key: str,
    offset: tuple[int, ...] | None,
    shape: tuple[int, ...] | None,
    message: str,
) -> None:
    ck = flexq.Checkpoint(make(tmp_path))
    with pytest.raises(CheckpointError, match=message):
        ck.read(key, offset, shape)


def test_sharded_checkpoint_with_index(tmp_path: Path) -> None:
    path = make(tmp_path, shard_of={"b": 1, "i": 2})
    ck = flexq.Checkpoint(path)
    assert ck.info("i").file == "model-00003-of-00003.safetensors"
    np.testing.assert_array_equal(ck.read("i"), np.arange(4, dtype=np.int32))


def rewrite_index(path: Path, key: str, name: str) -> None:
    index = path / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    doc["weight_map"][key] = name
    index.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../outside.safetensors", "not a plain file name"),
        ("/etc/passwd", "not a plain file name"),
        ("sub/x.safetensors", "not a plain file name"),
        ("missing.safetensors", "missing"),
        ("model-00001-of-00002.safetensors", "has no such tensor"),
    ],
)
def test_unsafe_or_wrong_index_entries_are_refused(tmp_path: Path, name: str, message: str) -> None:
    path = make(tmp_path, shard_of={"b": 1})
    rewrite_index(path, "b", name)
    with pytest.raises(CheckpointError, match=message):
        flexq.Checkpoint(path)


def test_symlink_pointing_outside_the_directory_is_refused(tmp_path: Path) -> None:
    path = make(tmp_path, shard_of={"b": 1})
    outside = tmp_path / "elsewhere.safetensors"
    (path / "model-00002-of-00002.safetensors").rename(outside)
    os.symlink(outside, path / "model-00002-of-00002.safetensors")
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        flexq.Checkpoint(path)


def test_same_tensor_in_two_shards_is_an_error(tmp_path: Path) -> None:
    a = flexq.save_checkpoint(tmp_path / "a", {"t": flexq.RawTensor.of(np.zeros(2, np.float32))})
    flexq.save_checkpoint(tmp_path / "b", {"t": flexq.RawTensor.of(np.ones(2, np.float32))})
    (tmp_path / "b" / "model.safetensors").rename(a / "other.safetensors")
    with pytest.raises(CheckpointError, match="'t' is in both"):
        flexq.Checkpoint(a)


def test_config_that_is_not_json_is_an_error(tmp_path: Path) -> None:
    path = make(tmp_path)
    (path / "config.json").write_text("{oops")
    with pytest.raises(CheckpointError, match="config.json: not valid JSON"):
        flexq.Checkpoint(path)


def test_not_a_directory_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="nope: no such directory"):
        flexq.Checkpoint(tmp_path / "nope")
    path = make(tmp_path / "c")
    with pytest.raises(CheckpointError, match="is a file; pass the checkpoint directory"):
        flexq.Checkpoint(path / "model.safetensors")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CheckpointError, match="notes.txt: not a directory"):
        flexq.Checkpoint(tmp_path / "notes.txt")
    with pytest.raises(CheckpointError, match="no \\*.safetensors"):
        flexq.Checkpoint(tmp_path)


def test_truncated_data_file_is_an_error(tmp_path: Path) -> None:
    path = make(tmp_path)
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-3])
    with pytest.raises(CheckpointError, match="outside the data buffer"):
        flexq.Checkpoint(path)


def test_reading_never_changes_the_directory(tmp_path: Path) -> None:
    path = make(tmp_path, shard_of={"b": 1})
    before = snapshot(path)
    with flexq.Checkpoint(path) as ck:
        for key in ck:
            ck.read(key)
    assert snapshot(path) == before


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_box_equals_numpy_slicing(data: st.DataObject) -> None:
    import tempfile

    shape = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    full = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    offset = [data.draw(st.integers(0, d - 1)) for d in shape]
    size = [data.draw(st.integers(0, d - o)) for d, o in zip(shape, offset, strict=True)]
    with tempfile.TemporaryDirectory() as tmp:
        flexq.save_checkpoint(tmp, {"t": flexq.RawTensor.of(full)})
        with flexq.Checkpoint(tmp) as ck:
            got = ck.read("t", offset, size)
            box = tuple(slice(o, o + s) for o, s in zip(offset, size, strict=True))
            np.testing.assert_array_equal(got, full[box])
            assert ck.bytes_read == got.nbytes
