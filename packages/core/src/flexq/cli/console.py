"""The rich console the ``flexq`` command prints its tables on."""

from __future__ import annotations

import sys

from rich.console import Console


def console() -> Console:
    """Terminal width on a TTY; when piped, wide enough never to cut tensor names
    (people grep this output)."""
    return Console() if sys.stdout.isatty() else Console(width=240)
