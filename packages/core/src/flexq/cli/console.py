"""Where the ``flexq`` command prints its tables (a rich console)."""

from __future__ import annotations

import sys

from rich.console import Console

#: Wide enough that a table never cuts a tensor name when piped (people grep this output).
PIPE_WIDTH = 10_000


def console() -> Console:
    """The terminal's width on a TTY (long cells fold); when piped, no width limit."""
    return Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)
