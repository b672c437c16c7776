"""flexq.interrupts.uninterrupted: a signal waits for the end of the block, then acts once."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import pytest

from flexq.interrupts import uninterrupted


def test_ctrl_c_inside_the_block_is_raised_after_it() -> None:
    steps = []

    def block() -> None:
        with uninterrupted():
            signal.raise_signal(signal.SIGINT)
            steps.append("after the signal")
        steps.append("after the block")  # not reached: the interrupt comes first

    # Python's own Ctrl-C handler, as an interactive run has it (a shell starts a
    # background job with SIGINT ignored, and Python then installs none).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            block()
        assert steps == ["after the signal"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_each_signal_reaches_the_handler_from_before_once(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        got.append(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with uninterrupted():
            with uninterrupted():  # blocks nest: delivered after the outer one
                signal.raise_signal(signal.SIGTERM)
                signal.raise_signal(signal.SIGTERM)
            assert got == []
        assert got == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_block_that_ignores_signals_drops_them_and_keeps_its_choice() -> None:
    try:
        with uninterrupted():
            signal.raise_signal(signal.SIGINT)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # e.g. the CLI once DST is complete
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_outside_the_main_thread_it_does_nothing() -> None:
    """Handlers run in the main thread only (and only it may set them)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with uninterrupted():
                pass
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert errors == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
