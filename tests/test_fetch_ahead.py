"""A default load reads the next piece's boxes on a thread of their own while this piece
decodes (:mod:`flexq.load.fetch_ahead`): the copy out of the page cache, or the wait for
the disk, no longer sits between two decodes. A read that fails there fails the load on
its own thread, with the reader's message; a piece above the bound is not read ahead.

The time this saves is the bench's (``nox -s bench -- physical``); the tests pin who
reads what, when, and that the values are the same."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

import flexq
from flexq.errors import CheckpointError
from flexq.io.checkpoint import Checkpoint
from flexq.load import fetch_ahead, sources
from flexq_fp8 import save_fp8_checkpoint

from .conftest import LINEARS, assert_loaded_as_composed, weights

Event = tuple[str, str, str]  # (what, key, thread name)


@pytest.fixture
def fp8_path(tmp_path: Path) -> Path:
    return save_fp8_checkpoint(tmp_path / "fp8", weights(), layout="block", block_size=(32, 32))


@pytest.fixture(autouse=True)
def spare_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core beside the workers, as a server has (the fetch-ahead waits for one)."""
    monkeypatch.setattr(sources, "spare_cores", lambda: 1)


def recorded(monkeypatch: pytest.MonkeyPatch, events: list[Event]) -> None:
    """Append ("read", key, thread) for every box read of a weight, ("ahead", key, thread)
    when the load asks for a weight to be read ahead, and ("decode", key, thread) when
    the fp8 format is asked to decode a weight."""
    real_read = Checkpoint.read
    real_ahead = sources.DirectSource.fetch_ahead

    def read(self: Checkpoint, key: str, *args: Any, **kwargs: Any) -> np.ndarray:
        if key in LINEARS:
            events.append(("read", key, threading.current_thread().name))
        return real_read(self, key, *args, **kwargs)

    def ahead(self: sources.DirectSource, index: int) -> None:
        for key in self._plans[index].source_slices:
            if key in LINEARS:
                events.append(("ahead", key, threading.current_thread().name))
        real_ahead(self, index)

    monkeypatch.setattr(Checkpoint, "read", read)
    monkeypatch.setattr(sources.DirectSource, "fetch_ahead", ahead)
    hooks = flexq.plugin.manager.registry.manager.hook.flexq_apply.get_hookimpls()
    impl = next(i for i in hooks if i.plugin_name == "fp8")
    function = impl.function

    def decode(*args: Any, **kwargs: Any) -> Any:
        key = (dict(zip(impl.argnames, args, strict=False)) | kwargs)["logical_key"]
        events.append(("decode", key, threading.current_thread().name))
        return function(*args, **kwargs)

    monkeypatch.setattr(impl, "function", decode)


def load(path: Path) -> dict[str, Any]:
    sd = {k: paddle.full(list(s), 7.0) for k, s in LINEARS.items()}
    flexq.load_state_dict(sd, path)
    return sd


def test_the_next_piece_is_read_on_its_own_thread_before_this_one_decodes(
    fp8_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[Event] = []
    recorded(monkeypatch, events)
    sd = load(fp8_path)
    main = threading.current_thread().name
    decodes = [i for i, e in enumerate(events) if e[0] == "decode"][-len(LINEARS) :]
    order = [events[i][1] for i in decodes]
    assert sorted(order) == sorted(LINEARS)
    reads = [(k, t) for what, k, t in events if what == "read"]
    assert sorted(k for k, _ in reads) == sorted(LINEARS)  # each weight read once
    # The checks before the first write read (and hold) the smallest piece on the load's
    # thread; every weight read after them but the first piece's is read ahead.
    checked = {k for what, k, _ in events[: decodes[0]] if what == "read"}
    ahead = [k for k, t in reads if k not in checked and k != order[0]]
    assert ahead
    assert all(t == "flexq-fetch-ahead" for k, t in reads if k in ahead)
    for k in range(len(order) - 1):
        if order[k + 1] in ahead:
            # Asked for before piece k decoded: its read runs beside that decode.
            assert events.index(("ahead", order[k + 1], main)) < decodes[k]
    assert_loaded_as_composed(sd, fp8_path)


def test_a_piece_above_the_bound_is_read_when_it_decodes(
    fp8_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "FETCH_AHEAD_BYTES", 1)
    events: list[Event] = []
    recorded(monkeypatch, events)
    sd = load(fp8_path)
    assert all(t != "flexq-fetch-ahead" for _, _, t in events)
    assert_loaded_as_composed(sd, fp8_path)


def test_nothing_is_read_ahead_when_the_workers_take_every_core(
    fp8_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "spare_cores", lambda: 0)
    events: list[Event] = []
    recorded(monkeypatch, events)
    sd = load(fp8_path)
    assert any(what == "ahead" for what, _, _ in events)  # asked for, and declined
    assert all(t != "flexq-fetch-ahead" for _, _, t in events)
    assert_loaded_as_composed(sd, fp8_path)


def test_spare_cores_are_the_cores_beyond_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from flexq.numerics import threads

    monkeypatch.setattr(threads, "cores", lambda: 8)
    monkeypatch.setenv("FLEXQ_THREADS", "3")
    assert threads.spare_cores() == 5
    monkeypatch.delenv("FLEXQ_THREADS")
    assert (threads.thread_count(), threads.spare_cores()) == (4, 4)
    monkeypatch.setattr(threads, "cores", lambda: 2)
    assert (threads.thread_count(), threads.spare_cores()) == (2, 0)
    monkeypatch.setenv("FLEXQ_THREADS", "1")
    assert threads.spare_cores() == 1


def test_a_failed_read_ahead_fails_the_load_on_its_thread(
    fp8_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_read = Checkpoint.read

    def read(self: Checkpoint, key: str, *args: Any, **kwargs: Any) -> np.ndarray:
        if threading.current_thread().name == "flexq-fetch-ahead":
            raise CheckpointError(f"model.safetensors: tensor {key!r}: read failed (test)")
        return real_read(self, key, *args, **kwargs)

    monkeypatch.setattr(Checkpoint, "read", read)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor .*read failed"):
        load(fp8_path)


def test_fetched_hands_over_boxes_and_errors() -> None:
    assert fetch_ahead.Fetched(lambda: {"a": 1}).result() == {"a": 1}

    def broken() -> dict[str, Any]:
        raise CheckpointError("x.safetensors: tensor 'w': cut short")

    with pytest.raises(CheckpointError, match="cut short"):
        fetch_ahead.Fetched(broken).result()
