"""Compose the checkpoint on every rank of a load, and stop every rank when one cannot.

For :func:`flexq.load_state_dict` on several ranks. Each rank opens the
checkpoint from its own path (each node may hold its own copy), so one rank can
fail where the others succeed: a node whose copy lacks a shard file, a file it
cannot read. flexq sends no weights between ranks, so such a rank cannot be
served by the others; it stops before any read or write with an error that says
which rank it is.

Engines that communicate (``flexcheckpoint``, ``native``, and ``auto``, which may
pick one of them) must not leave the healthy ranks waiting in a collective for
a rank that has already failed: the ranks exchange what happened (one small
``all_gather_object``) and every rank raises the same error, naming each rank that
failed and why. ``direct`` has no collective step at all, so each rank decides
alone: a rank that sees every file it needs loads, the others fail.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from flexq.compose import compose
from flexq.errors import CheckpointError, FlexqError

if TYPE_CHECKING:
    import os

    from flexq.compose import ComposedTransform


def compose_on_every_rank(
    path: str | os.PathLike[str],
    formats: list[str] | None,
    *,
    allow_unclaimed: bool,
    engine: str,
    process_group: Any,
) -> ComposedTransform:
    """:func:`flexq.compose` on this rank, agreed with the other ranks (see the module).

    :raises FlexqError: this rank's own error, prefixed with its rank, when ``engine``
        is ``"direct"``; otherwise, on every rank, one error naming every rank that
        failed (a :class:`CheckpointError` when each of them failed on its checkpoint).
    """
    import paddle.distributed as dist

    world = dist.get_world_size()
    try:
        ct: ComposedTransform | None = compose(path, formats, allow_unclaimed=allow_unclaimed)
        failure: FlexqError | None = None
    except FlexqError as exc:
        if world == 1:
            raise
        ct, failure = None, exc
    where = f"rank {dist.get_rank()} of {world} (host {socket.gethostname()})"
    if world > 1 and engine != "direct":
        mine = None if failure is None else (where, type(failure).__name__, str(failure))
        everyone: list[Any] = []
        dist.all_gather_object(everyone, mine, process_group)
        failed = [f for f in everyone if f is not None]
        if failed:
            kind = (
                CheckpointError
                if all(name == CheckpointError.__name__ for _, name, _ in failed)
                else FlexqError
            )
            told = "; ".join(f"{rank}: {message}" for rank, _, message in failed)
            raise kind(
                f"{told}; no rank was written. Each rank reads the checkpoint from its own "
                "path and flexq sends no weights between ranks: give every node its own "
                "copy of every file of the checkpoint"
            ) from failure
    if failure is not None:
        raise type(failure)(
            f"{where}: {failure}; this rank was not written (every rank reads the "
            "checkpoint from its own path: give every node its own copy of every file)"
        ) from None
    assert ct is not None
    return ct
