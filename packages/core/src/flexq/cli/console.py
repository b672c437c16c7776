"""Where the ``flexq`` command prints: its rich console, and Paddle's logs kept quiet."""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Paddle's loggers that report flexq's own calls (every file opened at INFO, "Unexpected
#: keys" naming the physical components flexq fetched on purpose, at WARNING).
PADDLE_LOGGERS = (
    "paddle.distributed.fleet.utils.log_util",
    "paddle.distributed.flex_checkpoint.aoa.aoa_engine",
)
#: Wide enough that a table never cuts a tensor name when piped (people grep this output).
PIPE_WIDTH = 10_000


def console() -> Console:
    """The terminal's width on a TTY (long cells fold); when piped, no width limit."""
    return Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)


class _BelowError(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


@contextmanager
def quiet_paddle(enabled: bool = True) -> Iterator[None]:
    """Drop Paddle's INFO and WARNING records while flexq calls Paddle (``--debug`` keeps
    them). A filter on the logger, not a level: Paddle sets its loggers' level when it
    is imported, which may happen inside the block."""
    if not enabled:
        yield
        return
    quiet = _BelowError()
    loggers = [logging.getLogger(name) for name in PADDLE_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)
