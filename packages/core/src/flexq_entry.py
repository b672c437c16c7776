"""The ``flexq`` command's entry point (its console script), for everyone who runs ``flexq``.

Python imports a package before any module in it, and ``flexq/__init__.py``
and the command's modules import numpy, pydantic and rich: a few tenths of a
second, up to a second on a busy machine. A SIGINT or SIGTERM in that time
would print a ``KeyboardInterrupt`` traceback from deep inside an import (or
end the process without a word). So this module, outside the package and
importing nothing that is not loaded already, takes both signals first: it
only notes them, and :func:`flexq.cli.main.main` reports a noted one as any
other interrupt (one line, exit 130 / 143) as soon as it has taken over.

Once the command has returned, its outcome is decided and printed: both
signals are ignored (one now would only replace the exit code with a death by
signal) and the process ends at once, without the interpreter's teardown. That
teardown runs Paddle's (a few tenths of a second) for nothing a finished
command needs, and under heavy load it twice never ended after an interrupted
convert had printed its line (in about 90 tries; no Python frame was left to
show where).
"""

from __future__ import annotations

# The C module, loaded at every start: ``signal`` itself would first import enum
# (~10 ms more during which Ctrl-C prints a traceback). It has no type stub.
import _signal  # type: ignore[import-not-found]
import os
import sys

TYPE_CHECKING = False  # (typing itself would import re and enum first)
if TYPE_CHECKING:
    from typing import NoReturn

#: Signals that came before the command took over, in order.
_noted: list[int] = []


def _note(signum: int, frame: object) -> None:
    _noted.append(signum)


def main() -> NoReturn:
    """Run the ``flexq`` command (``sys.argv``) and end the process with its exit code
    (for the console script only: it never returns)."""
    for sig in (_signal.SIGINT, _signal.SIGTERM):
        _signal.signal(sig, _note)
    from flexq.cli.main import main as run

    code = run(sys.argv[1:], noted=_noted)
    for sig in (_signal.SIGINT, _signal.SIGTERM):
        _signal.signal(sig, _signal.SIG_IGN)
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib is not loaded at start-up; this module imports nothing
            stream.flush()
        except OSError:  # the reader went away: nothing more to say to it
            pass
    os._exit(code)
