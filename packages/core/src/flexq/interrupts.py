"""Steps that SIGINT and SIGTERM must not cut in half, for flexq's own code.

Python runs a signal handler between any two bytecodes of the main thread, and
the usual handlers raise (``KeyboardInterrupt``, the CLI's ``Interrupted``). A
few steps are only safe whole: renaming convert's output into place (DST
complete or untouched), writing a staged batch of an atomic load, restoring
targets after a failure. :func:`uninterrupted` holds the signals off while such
a step runs and delivers them as soon as it is done, so an interrupt still
stops the work, just not half-way through one of these steps.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import FrameType
    from typing import Any

    #: What ``signal.signal`` takes and returns.
    Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

#: The signals that interrupt a run (Ctrl-C, and what ``kill`` and job schedulers send).
INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Hold SIGINT and SIGTERM off while the block runs; deliver them right after it.

    Only signals with a Python handler are held (those would raise inside the
    block); one whose handler is ``SIG_DFL`` still ends the process at once, as
    the caller asked, and an ignored one stays ignored. At the end each signal
    that came is passed, once, to the handler in force then: the one from
    before the block, or whatever the block installed instead (a block that
    sets ``SIG_IGN`` drops them). Outside the main thread this does nothing:
    Python runs handlers in the main thread only, so nothing is raised there.
    Blocks nest.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        came.append(signum)

    previous: dict[int, Handler] = {}
    try:
        for sig in INTERRUPTS:
            if callable(signal.getsignal(sig)):
                previous[sig] = signal.signal(sig, hold)
        yield
    finally:
        for held, handler in previous.items():
            if signal.getsignal(held) is hold:  # the block did not install its own
                signal.signal(held, handler)
        for signum in dict.fromkeys(came):
            _deliver(signum)


def _deliver(signum: int) -> None:
    handler = signal.getsignal(signum)
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)
