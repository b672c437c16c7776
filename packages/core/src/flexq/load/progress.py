"""A progress bar for API loads, in bytes read from the checkpoint (rich, on stderr).

For people loading a model from a notebook or a script: off by default in
:func:`flexq.load_state_dict` (a library stays quiet), on in the CLI and in
:func:`flexq.paddleformers.from_pretrained`, as PaddleFormers' own loading shows one.
A watcher thread reads :attr:`Checkpoint.bytes_read` a few times a second, so the
load itself does no extra work per tensor.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from flexq.polling import polled

if TYPE_CHECKING:
    from collections.abc import Iterator

    from flexq.io.checkpoint import Checkpoint

#: How often the bar is brought up to date.
_WATCH_SECONDS = 0.1


@contextmanager
def read_progress(checkpoint: Checkpoint, enabled: bool) -> Iterator[None]:
    """While the block loads from ``checkpoint``, a bar of the bytes read so far against
    the checkpoint's tensor bytes (one rank of several reads its share: the bar then
    ends below the total and is completed at the end)."""
    if not enabled:
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    start = checkpoint.bytes_read
    total = sum(checkpoint.info(key).nbytes for key in checkpoint)
    bar = Progress(
        "{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=Console(stderr=True),
    )
    task = bar.add_task(f"loading {checkpoint.path.name}", total=total)

    def tick() -> None:
        bar.update(task, completed=checkpoint.bytes_read - start)

    with bar:
        with polled(tick, _WATCH_SECONDS, "flexq-load-progress"):
            yield
        done = checkpoint.bytes_read - start
        bar.update(task, completed=done, total=max(done, 1) if done < total else total)
