"""Paddle's own logs kept quiet while flexq calls Paddle's loader.

Paddle's FlexCheckpoint loader logs every file it opens at INFO and warns about
"Unexpected keys" naming the physical components flexq fetched on purpose; a
user of flexq did not ask for either. Errors still show.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Paddle's loggers that report flexq's own calls (every file opened at INFO, "Unexpected
#: keys" naming the physical components flexq fetched on purpose, at WARNING).
PADDLE_LOGGERS = (
    "paddle.distributed.fleet.utils.log_util",
    "paddle.distributed.flex_checkpoint.aoa.aoa_engine",
)


class _BelowError(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


@contextmanager
def quiet_paddle(enabled: bool | None = None) -> Iterator[None]:
    """Drop Paddle's INFO and WARNING records while flexq calls Paddle.

    :param enabled: None quiets them unless the ``flexq`` logger is at DEBUG (what
        ``flexq --debug`` sets). A filter on the logger, not a level: Paddle sets its
        loggers' level when it is imported, which may happen inside the block.
    """
    if enabled is None:
        enabled = not logging.getLogger("flexq").isEnabledFor(logging.DEBUG)
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
