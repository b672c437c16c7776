"""Plain tensors stored in the target's dtype are read straight into the target (issue 30).

The passthrough fast path: no intermediate array, no copy; a box large enough is read
in row bands on the worker threads. Pinned here: the values are the checkpoint's bits
exactly, the fast path is the one taken (and only where it applies: a cast, an
``atomic`` load or a transposing AOA take the usual path, with the same values), and a
wrong ``out`` for :meth:`flexq.Checkpoint.read` is an error naming file and tensor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

import flexq
from flexq import RawTensor, save_checkpoint
from flexq.errors import CheckpointError
from flexq.load import sources
from flexq.numerics.arrays import host_view

SHAPES = {"embed.weight": (64, 48), "norm.weight": (48,), "lm_head.weight": (33, 48)}


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """A bf16 checkpoint of varied finite values (bits), and the bits."""
    rng = np.random.default_rng(3)
    bits = {
        k: (
            rng.integers(0, 0x7F00, size=s, dtype=np.uint16) | (rng.integers(0, 2, s) << 15)
        ).astype(np.uint16)
        for k, s in SHAPES.items()
    }
    path = save_checkpoint(
        tmp_path_factory.mktemp("plain"), {k: RawTensor("BF16", b) for k, b in bits.items()}
    )
    return path, bits


@pytest.fixture
def direct_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Keys read straight into targets; row bands of 1 KiB so small tensors use threads."""
    taken: list[str] = []
    real = sources.DirectSource.read_into

    def spy(self: Any, index: int, plan: Any, key: str, out: np.ndarray) -> bool:
        done = real(self, index, plan, key, out)
        taken.extend([key] if done else [])
        return done

    monkeypatch.setattr(sources.DirectSource, "read_into", spy)
    monkeypatch.setattr(sources, "READ_PART_BYTES", 1024)
    return taken


def bf16_targets(fill: float = 7.0) -> dict[str, Any]:
    return {k: paddle.full(list(s), fill, dtype="bfloat16") for k, s in SHAPES.items()}


def bits_of(t: Any) -> np.ndarray:
    view = host_view(t)
    assert view is not None
    return view.copy()


def assert_loaded(state: dict[str, Any], bits: dict[str, np.ndarray]) -> None:
    """Every target holds exactly the checkpoint's bits."""
    for k, b in bits.items():
        np.testing.assert_array_equal(bits_of(state[k]), b)


def test_bf16_tensors_are_read_straight_into_bf16_targets(
    plain: tuple[Path, dict[str, np.ndarray]], direct_reads: list[str]
) -> None:
    path, bits = plain
    state = bf16_targets()
    report = flexq.load_state_dict(state, path)
    assert sorted(direct_reads) == sorted(SHAPES)
    assert_loaded(state, bits)
    assert report.bytes_read == sum(b.nbytes for b in bits.values())


def test_trainable_parameters_are_read_straight_into(
    plain: tuple[Path, dict[str, np.ndarray]], direct_reads: list[str]
) -> None:
    path, bits = plain
    state: dict[str, Any] = {}
    for k, s in SHAPES.items():
        zero = paddle.nn.initializer.Constant(0.0)
        state[k] = paddle.create_parameter(list(s), "bfloat16", default_initializer=zero)
        assert state[k].stop_gradient is False  # trainable, as every LLM weight
    flexq.load_state_dict(state, path)
    assert sorted(direct_reads) == sorted(SHAPES)
    assert_loaded(state, bits)


def test_a_cast_or_an_atomic_load_takes_the_usual_path_with_the_same_values(
    plain: tuple[Path, dict[str, np.ndarray]], direct_reads: list[str]
) -> None:
    path, bits = plain
    wide = {k: paddle.zeros(list(s), dtype="float32") for k, s in SHAPES.items()}
    flexq.load_state_dict(wide, path)
    assert direct_reads == []  # bf16 -> float32 is a cast, not the stored bytes
    for k, b in bits.items():
        expected = (b.astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(wide[k].numpy(), expected)
    atomic = bf16_targets()
    flexq.load_state_dict(atomic, path, atomic=True)
    assert direct_reads == []  # atomic stages every batch before its first write
    assert_loaded(atomic, bits)


def test_a_transposing_aoa_takes_the_usual_path(
    plain: tuple[Path, dict[str, np.ndarray]], direct_reads: list[str]
) -> None:
    path, bits = plain
    state = {"head_t": paddle.zeros([48, 33], dtype="bfloat16")}
    flexq.load_state_dict(
        state, path, aoa_config={"aoa_statements": ["lm_head.weight^T -> head_t"]}
    )
    assert direct_reads == []
    np.testing.assert_array_equal(bits_of(state["head_t"]), bits["lm_head.weight"].T)


def test_read_into_a_wrong_array_names_file_and_tensor(
    plain: tuple[Path, dict[str, np.ndarray]],
) -> None:
    path, bits = plain
    with flexq.Checkpoint(path) as ckpt:
        into = np.zeros((64, 48), np.uint16)
        got = ckpt.read("embed.weight", out=into)
        assert got is into
        np.testing.assert_array_equal(into, bits["embed.weight"])
        band = np.zeros((4, 48), np.int16)  # 2-byte items of another dtype are fine
        ckpt.read("embed.weight", (8, 0), (4, 48), out=band)
        np.testing.assert_array_equal(band.view(np.uint16), bits["embed.weight"][8:12])
        for wrong in (np.zeros((64, 47), np.uint16), np.zeros((64, 48), np.float32)):
            with pytest.raises(CheckpointError, match=r"model\.safetensors.*'embed\.weight'"):
                ckpt.read("embed.weight", out=wrong)
        strided = np.zeros((64, 96), np.uint16)[:, ::2]
        with pytest.raises(CheckpointError, match="C-contiguous"):
            ckpt.read("embed.weight", out=strided)


def test_cached_pages_are_copied_without_prefetch_and_the_rest_read_as_before(
    plain: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run the page cache holds is copied by one page-cache-only read (no prefetch);
    where the platform has no such read, or the cache holds none of it, the run is
    prefetched and read as before: the same bytes either way."""
    from flexq.io import datafile

    path, bits = plain
    prefetched: list[list[tuple[int, int]]] = []
    real = datafile.DataFile.prefetch

    def spy(self: Any, ranges: Any) -> None:
        prefetched.append(list(ranges))
        real(self, ranges)

    monkeypatch.setattr(datafile.DataFile, "prefetch", spy)
    with flexq.Checkpoint(path) as ckpt:
        np.testing.assert_array_equal(ckpt.read("embed.weight"), bits["embed.weight"])
        if datafile._NOWAIT is not None:  # Linux: the file was just written, so cached
            assert prefetched == [[]]
        monkeypatch.setattr(datafile, "_NOWAIT", None)
        np.testing.assert_array_equal(ckpt.read("embed.weight"), bits["embed.weight"])
        start = ckpt.info("embed.weight").start
        assert prefetched[-1] == [(start, start + bits["embed.weight"].nbytes)]
