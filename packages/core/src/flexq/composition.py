"""The composition of the installed formats over one checkpoint, below Paddle's protocol.

For the core: :class:`Composition` holds every logical tensor of a checkpoint with its
owner and sources (:class:`LogicalEntry`) and plans, checks and decodes any box of
one exactly, with no state of its own. :func:`flexq.compose.composition_of` builds it;
flexq's engines, inspect, convert and verify take it. Paddle's loader calls it through
the :class:`flexq.ComposedTransform` adapter (:mod:`flexq.transform`), which holds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.errors import FlexqError, PluginError, TargetError
from flexq.io.dtypes import dtype
from flexq.numerics.arrays import is_paddle
from flexq.numerics.ops import ops_for
from flexq.numerics.rounding import OVERFLOW_ENV, Overflow, round_numpy, to_paddle
from flexq.numerics.scales import check_scales, scale_to_float32
from flexq.numerics.sources import BoxSources
from flexq.plan import ReadPlan, TargetSlice, box_inside
from flexq.plugin import passthrough

if TYPE_CHECKING:
    from flexq.io.checkpoint import Checkpoint
    from flexq.plugin.manager import FormatRegistry

PASSTHROUGH = passthrough.NAME


@dataclass(frozen=True)
class LogicalEntry:
    """One logical tensor of the composed view.

    :ivar owner: the format that builds it (``"passthrough"`` for a plain tensor).
    """

    key: str
    owner: str
    shape: tuple[int, ...]
    dtype: str
    sources: tuple[str, ...]

    @property
    def is_passthrough(self) -> bool:
        return self.owner == PASSTHROUGH


class Composition:
    """The formats composed over one checkpoint: every logical tensor with its owner,
    its sources, and the exact plan, check and decode of any box of it. Immutable after
    :func:`flexq.compose.composition_of` built it; for flexq's engines, inspect, convert
    and tests. (:class:`flexq.ComposedTransform` presents one to Paddle's loader.)
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        entries: dict[str, LogicalEntry],
        problems: list[str],
        formats: list[str],
        registry: FormatRegistry,
    ) -> None:
        self.checkpoint = checkpoint
        self.entries = entries
        #: what is wrong with the checkpoint (empty when compose() was strict).
        self.problems = problems
        #: the formats that were asked (installed ones, or the caller's list).
        self.formats = formats
        self._registry = registry

    def entry(self, logical_key: str) -> LogicalEntry:
        try:
            return self.entries[logical_key]
        except KeyError:
            raise FlexqError(
                f"{self.checkpoint.path}: no logical tensor named {logical_key!r}"
            ) from None

    def plan(self, logical_key: str, target: TargetSlice, force_global: bool = False) -> ReadPlan:
        """The owner's read plan for ``target`` (a whole-source plan if it has none)."""
        entry = self.entry(logical_key)
        if target.global_shape != entry.shape or not box_inside(
            target.global_offset, target.local_shape, entry.shape
        ):
            raise TargetError(
                f"{logical_key!r}: target box {target.global_offset}+{target.local_shape} of "
                f"{target.global_shape} does not fit the logical shape {entry.shape} "
                f"in {self.checkpoint.path}"
            )
        reg, ckpt = self._registry, self.checkpoint
        plan = reg.read_plan(entry.owner, ckpt, logical_key, target, force_global, entry.sources)
        if plan is None or plan.mode != "local" or force_global:
            whole = TargetSlice.whole(entry.shape, target.dtype)
            if plan is None and force_global:
                # A raw-hook owner that leaves global plans to the core: its whole-tensor
                # plan says which sources are scales. (A Format answers the first call.)
                plan = reg.read_plan(entry.owner, ckpt, logical_key, whole, False, entry.sources)
            boxes = {s: self._whole(s) for s in entry.sources}
            if plan is None:
                return ReadPlan("global", boxes, whole)
            return ReadPlan("global", boxes, whole, plan.scales, plan.checks, plan.check)
        return plan

    def check_plan(self, logical_key: str, plan: ReadPlan, sources: Mapping[str, Any]) -> None:
        """Check what ``plan`` declares, as read in ``sources``: its scales are finite (see
        :func:`flexq.formatkit.check_scales`), then the format's own ``plan.check``. Runs
        before the first write of a load, and before every decode that does not go
        through a load; ``sources`` holds at least the boxes of ``plan.checked``."""
        owner = self.entry(logical_key).owner
        for key in plan.scales:
            values, info = sources[key], self.checkpoint.info(key)
            check_scales(
                scale_to_float32(ops_for(values), values, info.dtype),
                scale=info,
                logical_key=logical_key,
                format_name=owner,
                offset=plan.source_slices[key][0],
            )
        if plan.check is not None:
            try:
                plan.check(BoxSources(self.checkpoint, plan, sources))
            except FlexqError:
                raise
            except Exception as exc:
                raise PluginError(
                    f"{self._registry.describe(owner)}: the read plan's check for "
                    f"{logical_key!r} raised {type(exc).__name__}: {exc}"
                ) from exc

    def read_sources(self, plan: ReadPlan) -> dict[str, np.ndarray]:
        """Read exactly the source boxes ``plan`` names, straight from the files."""
        return {
            key: self.checkpoint.read(key, offset, shape)
            for key, (offset, shape) in plan.source_slices.items()
        }

    def unchanged(self, logical_key: str, plan: ReadPlan, output_dtype: str) -> str | None:
        """The physical tensor whose box of ``plan`` IS the result in ``output_dtype``,
        byte for byte (a passthrough tensor stored in that very dtype), so the box may be
        read straight into the target; None when the owner's decode or a cast is needed."""
        if not self.entry(logical_key).is_passthrough or len(plan.source_slices) != 1:
            return None
        ((key, (_, shape)),) = plan.source_slices.items()
        same = dtype(self.checkpoint.info(key).dtype).paddle == output_dtype
        return key if same and tuple(shape) == tuple(plan.target.local_shape) else None

    def decode(
        self,
        logical_key: str,
        sources: Mapping[str, Any],
        plan: ReadPlan,
        output_dtype: str,
        out: np.ndarray | None = None,
        scratch: np.ndarray | None = None,
        host: bool = True,
    ) -> Any:
        """Decode: run the owner's decode step (its ``flexq_apply`` hook) for ``plan`` and
        round once to ``output_dtype``.

        Returns numpy (bfloat16 as uint16 bits) for numpy sources, Paddle for Paddle
        ones, and a Paddle tensor in any case when not ``host``.
        ``out`` (a C-contiguous numpy array of the box in the output's storage
        dtype, often the target's own memory) receives the result, which is then
        ``out`` itself or a view of it. For a float32 output it is offered to the
        format to fill; for another output the format may fill ``scratch`` (a
        C-contiguous float32 array of the box's shape) and the rounding writes
        into ``out``; for a bfloat16 output the format may also write its bits into
        ``out`` itself (``rounded_out``), rounded as the core would, and skip the float32.
        """
        entry = self.entry(logical_key)
        result = self._registry.decode(
            entry.owner,
            self.checkpoint,
            logical_key,
            sources,
            plan,
            output_dtype,
            out if output_dtype == "float32" else scratch,
            out if output_dtype == "bfloat16" else None,
        )
        try:
            if not host or is_paddle(result):
                return to_paddle(result, output_dtype)
            result = np.asarray(result)
            if out is not None and np.may_share_memory(result, out):
                return result  # the format wrote its (float32 or rounded) result into ``out``
            return round_numpy(result, output_dtype, out)
        except Overflow as exc:
            box = f"{plan.target.global_offset}+{plan.target.local_shape}"
            raise TargetError(
                f"{logical_key!r} (format {entry.owner}, {self.checkpoint.path}): box {box} "
                f"holds {exc.count} value(s) beyond {output_dtype} (largest magnitude "
                f"{exc.largest:g} > {float(np.finfo(exc.dtype).max):g}), which would become "
                f"inf; load into bfloat16 or float32, or set {OVERFLOW_ENV}=saturate to clamp "
                f"them to the largest {output_dtype} value"
            ) from None

    def load(self, logical_key: str, output_dtype: str | None = None) -> np.ndarray:
        """The whole logical tensor as numpy, read directly (for inspect, convert, tests)."""
        entry = self.entry(logical_key)
        out = output_dtype or entry.dtype
        plan = self.plan(logical_key, TargetSlice.whole(entry.shape, out))
        sources = self.read_sources(plan)
        self.check_plan(logical_key, plan, sources)
        return np.asarray(self.decode(logical_key, sources, plan, out))

    def _whole(self, key: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        shape = self.checkpoint.info(key).shape
        return (0,) * len(shape), shape
