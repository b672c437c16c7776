"""Checks on what format plugins return, so a misbehaving plugin fails with a clear error.

Used by the composer before any data is read (plans) and before any target is
written (apply results).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flexq.errors import PluginError
from flexq.plan import ReadPlan, TargetSlice

if TYPE_CHECKING:
    from flexq.checkpoint import Checkpoint


def check_plan(
    ckpt: Checkpoint,
    owner: str,
    logical_key: str,
    plan: object,
    target: TargetSlice,
    sources: tuple[str, ...],
) -> None:
    """Raise :class:`PluginError` unless ``plan`` is a well-formed plan for ``target``."""
    where = f"format {owner!r}: read plan for {logical_key!r}"
    if not isinstance(plan, ReadPlan):
        raise PluginError(f"{where} is a {type(plan).__name__}, not a flexq.ReadPlan")
    if plan.mode == "local" and plan.target != target:
        raise PluginError(f"{where} produces {plan.target}, not the asked {target}")
    for key, (offset, shape) in plan.source_slices.items():
        if key not in sources:
            raise PluginError(f"{where} reads {key!r}, which is not one of its sources {sources}")
        full = ckpt.info(key).shape
        if (
            len(offset) != len(full)
            or len(shape) != len(full)
            or any(o < 0 or s < 0 or o + s > d for o, s, d in zip(offset, shape, full, strict=True))
        ):
            raise PluginError(
                f"{where} reads box {offset}+{shape} of {key!r}, outside its shape {full}"
            )


def check_result(owner: str | None, logical_key: str, result: Any, shape: tuple[int, ...]) -> None:
    """Raise :class:`PluginError` unless ``result`` is an array of ``shape``."""
    who = f"format {owner!r}" if owner else "passthrough"
    if result is None or not hasattr(result, "shape"):
        raise PluginError(f"{who}: apply for {logical_key!r} returned {type(result).__name__}")
    if tuple(result.shape) != tuple(shape):
        raise PluginError(
            f"{who}: apply for {logical_key!r} returned shape {tuple(result.shape)}, "
            f"expected {tuple(shape)}"
        )
