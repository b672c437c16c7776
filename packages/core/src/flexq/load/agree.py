"""Run a load's checks on every rank, and stop every rank when one of them fails.

For :func:`flexq.load_state_dict` on several ranks. Each rank opens the
checkpoint from its own path (each node may hold its own copy) and checks its own
targets, so one rank can fail where the others succeed: a node whose copy lacks a
shard file, a rank whose kept-quantized shard cuts a quantization block. flexq
sends no weights between ranks, so such a rank cannot be served by the others; it
stops before any read or write with an error that says which rank it is.

Engines that communicate (``flexcheckpoint``, ``native``, and ``auto``, which may
pick one of them) must not leave the healthy ranks waiting in a collective for
a rank that has already failed: the ranks exchange what happened (one small
``all_gather_object``) and every rank raises the same error, naming each rank that
failed and why. ``direct`` has no collective step at all, so each rank decides
alone: a rank whose own step passes loads, the others fail.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any, TypeVar

from flexq import errors
from flexq.compose import composition_of
from flexq.errors import FlexqError

if TYPE_CHECKING:
    import os
    from collections.abc import Callable

    from flexq.composition import Composition

T = TypeVar("T")

#: Why a rank's compose failure cannot be served by the others, and what to do.
_COPIES = (
    "Each rank reads the checkpoint from its own path and flexq sends no weights between "
    "ranks: give every node its own copy of every file of the checkpoint",
    "every rank reads the checkpoint from its own path: give every node its own copy of every file",
)


def compose_on_every_rank(
    path: str | os.PathLike[str],
    formats: list[str] | None,
    *,
    allow_unclaimed: bool,
    engine: str,
    process_group: Any,
) -> Composition:
    """:func:`~flexq.compose.composition_of` on this rank, agreed with the other ranks
    (see the module).

    :raises FlexqError: this rank's own error, prefixed with its rank, when ``engine``
        is ``"direct"``; otherwise, on every rank, one error naming every rank that
        failed (a :class:`CheckpointError` when each of them failed on its checkpoint).
    """
    return on_every_rank(
        lambda: composition_of(path, formats, allow_unclaimed=allow_unclaimed),
        engine=engine,
        process_group=process_group,
        advice=_COPIES,
    )


def on_every_rank(
    step: Callable[[], T], *, engine: str, process_group: Any, advice: tuple[str, str]
) -> T:
    """``step()`` on this rank, agreed with the other ranks when ``engine`` communicates.

    :param advice: what to do, as the agreed error ends (``advice[0]``) and as one
        ``direct`` rank's error ends (``advice[1]``).
    :raises FlexqError: as :func:`compose_on_every_rank` says; the agreed error has the
        type every failed rank raised (:class:`FlexqError` when they differ).
    """
    import paddle.distributed as dist

    world = dist.get_world_size()
    try:
        result: T | None = step()
        failure: FlexqError | None = None
    except FlexqError as exc:
        if world == 1:
            raise
        result, failure = None, exc
    where = f"rank {dist.get_rank()} of {world} (host {socket.gethostname()})"
    if world > 1 and engine != "direct":
        mine = None if failure is None else (where, type(failure).__name__, str(failure))
        everyone: list[Any] = []
        dist.all_gather_object(everyone, mine, process_group)
        failed = [f for f in everyone if f is not None]
        if failed:
            told = "; ".join(f"{rank}: {message}" for rank, _, message in failed)
            raise _kind({name for _, name, _ in failed})(
                f"{told}; no rank was written. {advice[0]}"
            ) from failure
    if failure is not None:
        raise type(failure)(
            f"{where}: {failure}; this rank was not written ({advice[1]})"
        ) from None
    return result  # type: ignore[return-value]  # step() returned: result is its T


def _kind(names: set[str]) -> type[FlexqError]:
    """The error type every failed rank raised, or FlexqError when they differ."""
    found = getattr(errors, names.pop(), FlexqError) if len(names) == 1 else FlexqError
    return found if isinstance(found, type) and issubclass(found, FlexqError) else FlexqError
