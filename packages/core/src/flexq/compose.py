"""Compose the installed formats over one checkpoint into ONE LoadTransform.

:class:`ComposedTransform` follows Paddle's upstream ``LoadTransform`` protocol
(``logical_metadata``, ``source_keys``, ``read_plan``, ``apply``), so it can be
handed to a Paddle whose ``load_state_dict`` takes ``load_transform=``, and it
drives flexq's own pipeline on Paddle 3.3.1. Each logical tensor has one owner
format; physical tensors no format claims pass through unchanged; everything
else (two owners, a component used twice, an orphaned scale, an element format
nobody decodes) is a problem that names the tensor and the formats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.arrays import (
    host_to_numpy,
    paddle_dtype_name,
    passthrough_dtype,
    round_numpy,
    round_paddle,
    to_paddle,
)
from flexq.checkpoint import Checkpoint
from flexq.errors import FlexqError, FormatError, PluginError, TargetError
from flexq.ops import is_paddle, ops_for
from flexq.plan import LogicalTensor, ReadPlan, TargetSlice, box_inside
from flexq.plugins import FormatRegistry, registry
from flexq.validate import check_plan, check_result

if TYPE_CHECKING:
    import os


@dataclass(frozen=True)
class LogicalEntry:
    """One logical tensor of the composed view.

    :ivar owner: the format that builds it, or None for a passthrough tensor.
    """

    key: str
    owner: str | None
    shape: tuple[int, ...]
    dtype: str
    sources: tuple[str, ...]


class ComposedTransform:
    """All formats over one checkpoint, as one object with the LoadTransform protocol."""

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
        self._plans: dict[str, ReadPlan] = {}

    # -- the upstream protocol ------------------------------------------------
    def logical_metadata(self) -> dict[str, Any]:
        """Logical key -> Paddle ``LocalTensorMetadata`` of the whole logical tensor."""
        from paddle.distributed.flex_checkpoint.dcp.metadata import LocalTensorMetadata

        return {
            k: LocalTensorMetadata(
                global_offset=(0,) * len(e.shape),
                local_shape=e.shape,
                dtype=e.dtype,
                global_shape=e.shape,
            )
            for k, e in self.entries.items()
        }

    def source_keys(self, logical_key: str) -> list[str]:
        """The physical tensors ``logical_key`` is built from."""
        return list(self.entry(logical_key).sources)

    def read_plan(
        self, logical_key: str, target_metadata: Any, force_global: bool = False
    ) -> ReadPlan:
        """Plan the reads for one target shard (remembered for the next :meth:`apply`)."""
        entry = self.entry(logical_key)
        target = _target_slice(target_metadata, entry)
        plan = self.plan(logical_key, target, force_global=force_global)
        self._plans[logical_key] = plan
        return plan

    def apply(self, logical_key: str, source_tensors: Mapping[str, Any], output_dtype: Any) -> Any:
        """Build the planned box of ``logical_key`` as a Paddle tensor of ``output_dtype``."""
        entry = self.entry(logical_key)
        plan = self._plans.get(logical_key) or self.plan(
            logical_key, TargetSlice.whole(entry.shape, entry.dtype), force_global=True
        )
        out = paddle_dtype_name(output_dtype)
        sources = host_to_numpy(source_tensors)
        return to_paddle(self.dequantize(logical_key, sources, plan, out), out)

    # -- flexq's own API ------------------------------------------------------
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
        if entry.owner is None:
            return ReadPlan("local", {entry.key: target.box}, target)
        whole = TargetSlice.whole(entry.shape, target.dtype)
        proposed = self._registry.call(
            entry.owner,
            "flexq_read_plan",
            checkpoint=self.checkpoint,
            logical_key=logical_key,
            target=target,
            force_global=force_global,
        )
        plan = None
        if proposed is not None:
            plan = check_plan(
                self.checkpoint, entry.owner, logical_key, proposed, target, entry.sources
            )
        if plan is None or plan.mode != "local" or (force_global and not target.is_whole):
            return ReadPlan("global", {s: self._whole(s) for s in entry.sources}, whole)
        return plan

    def read_sources(self, logical_key: str, plan: ReadPlan) -> dict[str, np.ndarray]:
        """Read exactly the source boxes ``plan`` names, straight from the files.

        Boxes contiguous in their file come back as read-only views of the
        mapped file (no copy); formats only read their sources.
        """
        return {
            key: self.checkpoint.read(key, offset, shape, copy=False)
            for key, (offset, shape) in plan.source_slices.items()
        }

    def dequantize(
        self,
        logical_key: str,
        sources: Mapping[str, Any],
        plan: ReadPlan,
        output_dtype: str,
        out: np.ndarray | None = None,
        scratch: np.ndarray | None = None,
    ) -> Any:
        """Run the owner's apply for ``plan`` and round once to ``output_dtype``.

        Returns numpy (bfloat16 as uint16 bits) for numpy sources, Paddle for Paddle ones.
        ``out`` (a C-contiguous numpy array of the box in the output's storage
        dtype, often the target's own memory) receives the result, which is then
        ``out`` itself or a view of it. For a float32 output it is offered to the
        format to fill; for another output the format may fill ``scratch`` (a
        C-contiguous float32 array of the box's shape) and the rounding writes
        into ``out``.
        """
        entry = self.entry(logical_key)
        if entry.owner is None:
            result = self._passthrough(entry, sources[entry.key], output_dtype)
        else:
            if not self._registry.implements(entry.owner, "flexq_apply"):
                raise PluginError(f"format {entry.owner!r} claims {logical_key!r} but has no apply")
            result = self._registry.call(
                entry.owner,
                "flexq_apply",
                checkpoint=self.checkpoint,
                logical_key=logical_key,
                sources=sources,
                plan=plan,
                output_dtype=output_dtype,
                out=out if output_dtype == "float32" else scratch,
            )
        check_result(entry.owner, logical_key, result, plan.target.local_shape, output_dtype)
        if is_paddle(result):
            return round_paddle(result, output_dtype)
        result = np.asarray(result)
        if out is not None and np.may_share_memory(result, out):
            return result  # the format wrote the float32 result into ``out``
        return round_numpy(result, output_dtype, out)

    def load(self, logical_key: str, output_dtype: str | None = None) -> np.ndarray:
        """The whole logical tensor as numpy, read directly (for inspect, convert, tests)."""
        entry = self.entry(logical_key)
        out = output_dtype or entry.dtype
        plan = self.plan(logical_key, TargetSlice.whole(entry.shape, out))
        result = self.dequantize(logical_key, self.read_sources(logical_key, plan), plan, out)
        return np.asarray(result)

    def _whole(self, key: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        shape = self.checkpoint.info(key).shape
        return (0,) * len(shape), shape

    def _passthrough(self, entry: LogicalEntry, x: Any, output_dtype: str) -> Any:
        # numpy holds BF16 as raw bits: widen them before any other rounding.
        st = self.checkpoint.info(entry.key).dtype
        if st == "BF16" and output_dtype != "bfloat16" and not is_paddle(x):
            return ops_for(x).float32(x, st)
        return x


def compose(
    path: str | os.PathLike[str] | Checkpoint,
    formats: list[str] | None = None,
    *,
    strict: bool = True,
    _registry: FormatRegistry = registry,
) -> ComposedTransform:
    """Compose the installed formats (or exactly ``formats``) over the checkpoint at ``path``.

    :param strict: raise on the first problem (the default); with False the
        problems are collected in ``.problems`` (what ``flexq inspect`` shows).
    :raises FlexqError: on a malformed checkpoint, a conflict between formats,
        an orphaned component or an element format no installed format decodes.
    """
    names = _registry.active(formats)
    ckpt = path if isinstance(path, Checkpoint) else Checkpoint(path)
    entries: dict[str, LogicalEntry] = {}
    problems: list[str] = []
    used: dict[str, str] = {}  # physical key -> logical key using it
    recognized: dict[str, str] = {}  # physical key -> format recognising it
    for name in names:
        for key, entry in _claims(ckpt, name, _registry).items():
            if key in entries:
                raise PluginError(
                    f"{ckpt.path}: logical tensor {key!r} is claimed by formats "
                    f"{entries[key].owner!r} and {name!r} "
                    f"({_registry.describe(str(entries[key].owner))}, {_registry.describe(name)})"
                )
            for src in entry.sources:
                if src in used:
                    raise PluginError(
                        f"{ckpt.path}: tensor {src!r} is a component of both {used[src]!r} "
                        f"({entries[used[src]].owner}) and {key!r} ({name})"
                    )
                used[src] = key
            entries[key] = entry
        found = _registry.call(name, "flexq_recognized_keys", checkpoint=ckpt)
        for src in found or ():
            recognized.setdefault(src, name)
    for key, info in ckpt.tensors.items():
        if key in used:
            continue
        if key in recognized:
            problems.append(
                f"{info.file}: tensor {key!r} belongs to format {recognized[key]!r} "
                f"but no logical tensor uses it (orphaned component)"
            )
            continue
        dtype = passthrough_dtype(info.dtype)
        if dtype is None:
            problems.append(
                f"{info.file}: tensor {key!r} has element format {info.dtype}, which no "
                f"format in {names} decodes"
            )
            continue
        if key in entries:
            raise PluginError(
                f"{ckpt.path}: format {entries[key].owner!r} names logical tensor {key!r}, "
                f"which is also an unrelated physical tensor in {info.file}"
            )
        entries[key] = LogicalEntry(key, None, info.shape, dtype, (key,))
    if strict and problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise FormatError(problems[0] + more)
    return ComposedTransform(ckpt, entries, problems, names, _registry)


def _claims(ckpt: Checkpoint, name: str, reg: FormatRegistry) -> dict[str, LogicalEntry]:
    claimed = reg.call(name, "flexq_logical_metadata", checkpoint=ckpt) or {}
    if not isinstance(claimed, Mapping):
        raise PluginError(f"{reg.describe(name)}: flexq_logical_metadata returned {type(claimed)}")
    entries = {}
    for key, meta in claimed.items():
        if not isinstance(meta, LogicalTensor):
            raise PluginError(f"{reg.describe(name)}: metadata of {key!r} is not a LogicalTensor")
        sources = reg.call(name, "flexq_source_keys", checkpoint=ckpt, logical_key=key)
        if not sources or isinstance(sources, str):
            raise PluginError(f"{reg.describe(name)}: no source keys for logical tensor {key!r}")
        for src in sources:
            if src not in ckpt.tensors:
                raise PluginError(
                    f"{reg.describe(name)}: logical tensor {key!r} needs {src!r}, "
                    f"which is not in {ckpt.path}"
                )
        entries[key] = LogicalEntry(key, name, tuple(meta.shape), meta.dtype, tuple(sources))
    return entries


def _target_slice(meta: Any, entry: LogicalEntry) -> TargetSlice:
    """Paddle's LocalTensorMetadata (or a TargetSlice) as a TargetSlice."""
    if isinstance(meta, TargetSlice):
        return meta
    global_shape = getattr(meta, "global_shape", None) or entry.shape
    return TargetSlice(
        tuple(global_shape),
        tuple(meta.local_shape),
        tuple(meta.global_offset),
        paddle_dtype_name(meta.dtype),
    )
