"""``flexq.load_state_dict``: load a quantized (or plain) checkpoint into Paddle tensors in place.

For users of Paddle models: one call composes the installed formats over the
checkpoint and runs the engine that suits the situation
(:mod:`flexq.load.engine`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flexq.compose import compose
from flexq.load.engine import (
    DEFAULT_MAX_INFLIGHT,
    EngineName,
    LoadOptions,
    LoadReport,
    choose,
)

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping


def load_state_dict(
    state_dict: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    aoa_config: dict[str, Any] | None = None,
    formats: list[str] | None = None,
    engine: EngineName = "auto",
    process_group: Any = None,
    offload: bool = False,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT,
    atomic: bool = True,
    allow_unclaimed: bool = False,
    **flexcheckpoint_options: Any,
) -> LoadReport:
    """Load the checkpoint at ``path`` into the tensors of ``state_dict``, in place.

    :param state_dict: target tensors (plain, dist tensors, ShardedWeight, nested dicts).
    :param aoa_config: ``{"aoa_statements": [...]}`` over logical tensor names.
    :param formats: format names to use (default: every installed format).
    :param engine: ``"native"`` (Paddle's own ``load_transform``),
        ``"flexcheckpoint"`` (components fetched through Paddle's loader and
        resharder: files balanced over ranks, each read once), ``"direct"`` (each
        rank reads exactly its plan slices from the files, no collective
        communication), or ``"auto"``: native, else flexcheckpoint, else direct
        where Paddle's communicators cannot run (several ranks, CPU-only build).
    :param max_inflight_bytes: bound on dequantized float32 bytes staged at once.
    :param atomic: when the load needs several batches, keep a host-memory copy of
        every region written before the last batch, so a failure in a later batch
        (a plugin error, a corrupt block) restores it. Costs host memory up to the
        size of the targets (device memory stays targets plus one batch); False
        bounds host memory too, and a failure part-way then leaves the earlier
        batches written.
    :param allow_unclaimed: load tensors that look quantized but that no
        installed format claims as they are (see :func:`flexq.compose`).
    :return: what the load did (engine, pieces, bytes read by this rank, casts).
    :raises FlexqError: on any problem; with ``atomic`` the targets are then unchanged.
    """
    ct = compose(path, formats, allow_unclaimed=allow_unclaimed)
    options = LoadOptions(
        aoa_config, max_inflight_bytes, atomic, process_group, offload, flexcheckpoint_options
    )
    return choose(engine, ct, options).load(ct, state_dict, options)
