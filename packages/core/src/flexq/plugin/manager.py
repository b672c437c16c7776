"""The format registry: installed formats (entry points) plus formats registered at run time.

Entry points in the group ``flexq`` are discovered lazily, once, on first use.
``FLEXQ_FORMATS`` (comma-separated names) limits which entry points load;
``FLEXQ_DISABLED_FORMATS`` blocks names. A format whose entry point fails to
import is kept as *broken*: it is listed with its error, the other formats keep
working, and asking for it by name raises. The built-in passthrough owner
(:mod:`flexq.plugin.passthrough`) is registered first, like pluggy's defaults.

Every hook has one typed method here, which calls ONE format's implementation
through ``pm.hook`` (so ``pm.trace`` and hook-call monitoring see it) and checks
what the format returned, so a misbehaving plugin fails with a clear
:class:`PluginError` naming it instead of deep inside a load.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal

import pluggy

from flexq.errors import FlexqError, PluginError
from flexq.plan import LogicalTensor, ReadPlan, TargetSlice, box_inside
from flexq.plugin import passthrough, spec

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from flexq.io.checkpoint import Checkpoint
    from flexq.io.writer import RawTensor

ALLOW_ENV = "FLEXQ_FORMATS"
BLOCK_ENV = "FLEXQ_DISABLED_FORMATS"
#: Paddle dtype names a format's apply may return (float32, or the output dtype).
_FLOAT_RESULTS = frozenset({"float16", "bfloat16", "float32", "float64"})


@dataclass(frozen=True)
class FormatInfo:
    """One row of :func:`list_formats`.

    :ivar methods: the ``quant_method`` values (and ``compressed-tensors/<format>``)
        the format decodes.
    """

    name: str
    version: str
    distribution: str
    source: Literal["entry point", "runtime", "builtin"]
    description: str
    #: why the format could not be loaded (None when it works).
    error: str | None = None
    methods: tuple[str, ...] = ()


def _env_names(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def _describe(plugin: object) -> str:
    doc = (getattr(plugin, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


class FormatRegistry:
    """pluggy's PluginManager with flexq's discovery rules and one checked method per hook."""

    def __init__(self) -> None:
        self._pm: pluggy.PluginManager | None = None
        self._infos: dict[str, FormatInfo] = {}
        #: the ALLOW_ENV error when it names formats no entry point provides.
        self._allow_error: str | None = None

    # -- discovery --------------------------------------------------------------
    @property
    def manager(self) -> pluggy.PluginManager:
        """The plugin manager, with entry points loaded on first access."""
        if self._pm is None:
            self._pm = pluggy.PluginManager(spec.NAME)
            self._pm.add_hookspecs(spec)
            self._pm.register(passthrough, name=passthrough.NAME)
            self._infos[passthrough.NAME] = FormatInfo(
                passthrough.NAME, "", "flexq", "builtin", _describe(passthrough)
            )
            self._load_entry_points()
        return self._pm

    def _load_entry_points(self) -> None:
        allow, block = _env_names(ALLOW_ENV), _env_names(BLOCK_ENV) or set()
        found = entry_points(group=spec.NAME)
        unknown = sorted((allow or set()) - set(found.names))
        if unknown:
            self._allow_error = (
                f"{ALLOW_ENV}={os.environ[ALLOW_ENV]!r} names {', '.join(map(repr, unknown))}, "
                f"which no installed format provides (installed: {sorted(found.names)})"
            )
        for ep in found:
            if ep.name in block or (allow is not None and ep.name not in allow):
                continue
            dist = ep.dist.name if ep.dist else "?"
            version = ep.dist.version if ep.dist else ""
            try:
                plugin = ep.load()
                self._add(plugin, ep.name)
            except PluginError as exc:
                error = str(exc)
            except Exception as exc:
                error = f"format {ep.name!r} from {dist}: entry point {ep.value} failed: {exc!r}"
            else:
                info = FormatInfo(ep.name, version, dist, "entry point", _describe(plugin))
                self._infos[ep.name] = self._with_methods(info)
                continue
            self._infos[ep.name] = FormatInfo(ep.name, version, dist, "entry point", "", error)

    def _add(self, plugin: object, name: str) -> None:
        pm = self.manager
        try:
            pm.register(plugin, name=name)
            pm.check_pending()
        except pluggy.PluginValidationError as exc:
            if pm.get_plugin(name) is not None:
                pm.unregister(name=name)
            raise PluginError(f"format {name!r}: {exc}") from None

    def _with_methods(self, info: FormatInfo) -> FormatInfo:
        try:
            methods = tuple(sorted(self.quant_methods(info.name)))
        except FlexqError as exc:
            self.manager.unregister(name=info.name)
            return replace(info, error=str(exc))
        return replace(info, methods=methods)

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register ``plugin`` under ``name`` (default: its ``FORMAT_NAME`` or ``__name__``)."""
        name = name or getattr(plugin, "FORMAT_NAME", None) or getattr(plugin, "__name__", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"cannot tell the name of format plugin {plugin!r}; pass name=")
        if name in self._infos or self.manager.get_plugin(name) is not None:
            raise PluginError(f"a format named {name!r} is already registered")
        self._add(plugin, name)
        version = str(getattr(plugin, "__version__", ""))
        info = FormatInfo(name, version, "", "runtime", _describe(plugin))
        self._infos[name] = info
        self._infos[name] = self._with_methods(info)
        return name

    def unregister(self, name: str) -> None:
        """Remove the format ``name`` (entry point or runtime)."""
        if name not in self._infos or name == passthrough.NAME:
            raise PluginError(f"no format named {name!r} is registered")
        del self._infos[name]
        if self.manager.get_plugin(name) is not None:
            self.manager.unregister(name=name)

    def rows(self) -> list[FormatInfo]:
        """Every known format, working or broken, sorted by name (the passthrough owner
        excluded)."""
        self.manager  # noqa: B018 - discovery happens on first access
        return sorted(
            (i for i in self._infos.values() if i.source != "builtin"), key=lambda i: i.name
        )

    def broken(self) -> list[FormatInfo]:
        """The formats that failed to load."""
        return [i for i in self.rows() if i.error is not None]

    @property
    def allow_error(self) -> str | None:
        """Why ``FLEXQ_FORMATS`` cannot be honoured (it names no installed format), or None."""
        self.manager  # noqa: B018 - discovery happens on first access
        return self._allow_error

    def active(self, names: list[str] | None = None) -> list[str]:
        """Names of the working formats to use: all of them, or exactly ``names``."""
        working = [i.name for i in self.rows() if i.error is None]
        if names is None:
            if self._allow_error is not None:
                raise PluginError(self._allow_error)
            return working
        for n in names:
            info = self._infos.get(n)
            if info is None or info.source == "builtin":
                raise PluginError(f"format {n!r} is not installed (installed: {working})")
            if info.error is not None:
                raise PluginError(info.error)
        return list(names)

    def info(self, name: str) -> FormatInfo | None:
        """The row of format ``name``, if it is known."""
        self.manager  # noqa: B018
        return self._infos.get(name)

    def describe(self, name: str) -> str:
        """``format 'x' (distribution)`` for error messages (no distribution when registered
        at run time)."""
        info = self._infos.get(name)
        dist = f" ({info.distribution})" if info and info.distribution else ""
        return f"format {name!r}{dist}"

    def implements(self, name: str, hook: str) -> bool:
        """Whether format ``name`` implements hook ``hook`` (e.g. ``"flexq_encode"``)."""
        return any(i.plugin_name == name for i in getattr(self.manager.hook, hook).get_hookimpls())

    # -- one checked method per hook ----------------------------------------------
    def _call(self, name: str, hook: str, **kwargs: Any) -> Any:
        """``pm.hook.<hook>`` restricted to format ``name``; a non-flexq exception escaping
        the plugin becomes a :class:`PluginError` naming the format."""
        pm = self.manager
        others = [p for n, p in pm.list_name_plugin() if n != name and p is not None]
        caller = pm.subset_hook_caller(hook, others)
        try:
            return caller(**kwargs)
        except FlexqError:
            raise
        except Exception as exc:
            raise PluginError(
                f"{self.describe(name)}: {hook} raised {type(exc).__name__}: {exc}"
            ) from exc

    def quant_methods(self, name: str) -> frozenset[str]:
        """The config methods format ``name`` decodes."""
        found = self._call(name, "flexq_quant_methods") or ()
        if isinstance(found, str) or not all(isinstance(m, str) for m in found):
            raise PluginError(
                f"{self.describe(name)}: flexq_quant_methods must return names, got {found!r}"
            )
        return frozenset(found)

    def logical_metadata(self, name: str, checkpoint: Checkpoint) -> dict[str, LogicalTensor]:
        """The logical tensors format ``name`` claims in ``checkpoint``, checked."""
        claimed = self._call(name, "flexq_logical_metadata", checkpoint=checkpoint) or {}
        who = self.describe(name)
        if not isinstance(claimed, Mapping):
            raise PluginError(f"{who}: flexq_logical_metadata returned {type(claimed).__name__}")
        for key, meta in claimed.items():
            if not isinstance(meta, LogicalTensor):
                raise PluginError(f"{who}: metadata of {key!r} is not a LogicalTensor")
        return dict(claimed)

    def recognized_keys(self, name: str, checkpoint: Checkpoint) -> frozenset[str]:
        """Physical keys format ``name`` recognizes as its components, used or not."""
        found = self._call(name, "flexq_recognized_keys", checkpoint=checkpoint) or ()
        return frozenset(found)

    def source_keys(self, name: str, checkpoint: Checkpoint, logical_key: str) -> tuple[str, ...]:
        """The physical components of ``logical_key``, checked to exist in ``checkpoint``."""
        sources = self._call(
            name, "flexq_source_keys", checkpoint=checkpoint, logical_key=logical_key
        )
        who = self.describe(name)
        if not sources or isinstance(sources, str):
            raise PluginError(f"{who}: no source keys for logical tensor {logical_key!r}")
        for src in sources:
            if src not in checkpoint.tensors:
                raise PluginError(
                    f"{who}: logical tensor {logical_key!r} needs {src!r}, "
                    f"which is not in {checkpoint.path}"
                )
        return tuple(sources)

    def read_plan(
        self,
        name: str,
        checkpoint: Checkpoint,
        logical_key: str,
        target: TargetSlice,
        force_global: bool,
        sources: tuple[str, ...],
    ) -> ReadPlan | None:
        """Format ``name``'s plan for ``target``, checked: a well-formed plan for that box
        reading boxes inside its own sources (None: the format plans whole sources)."""
        plan = self._call(
            name,
            "flexq_read_plan",
            checkpoint=checkpoint,
            logical_key=logical_key,
            target=target,
            force_global=force_global,
        )
        if plan is None:
            return None
        where = f"{self.describe(name)}: read plan for {logical_key!r}"
        if not isinstance(plan, ReadPlan):
            raise PluginError(f"{where} is a {type(plan).__name__}, not a flexq.ReadPlan")
        if plan.mode == "local" and plan.target != target:
            raise PluginError(f"{where} produces {plan.target}, not the asked {target}")
        for key, (offset, shape) in plan.source_slices.items():
            if key not in sources:
                raise PluginError(
                    f"{where} reads {key!r}, which is not one of its sources {sources}"
                )
            full = checkpoint.info(key).shape
            if not box_inside(offset, shape, full):
                raise PluginError(
                    f"{where} reads box {offset}+{shape} of {key!r}, outside its shape {full}"
                )
        unread = [k for k in plan.checked if k not in plan.source_slices]
        if unread:
            raise PluginError(f"{where} declares scales or checks {unread} it does not read")
        return plan

    def apply(
        self,
        name: str,
        checkpoint: Checkpoint,
        logical_key: str,
        sources: Mapping[str, Any],
        plan: ReadPlan,
        output_dtype: str,
        out: Any,
    ) -> Any:
        """Format ``name``'s dequantized box for ``plan``, checked: an array of the
        plan's box, floating point (float32 or ``output_dtype``)."""
        if not self.implements(name, "flexq_apply"):
            raise PluginError(f"{self.describe(name)} claims {logical_key!r} but has no apply")
        result = self._call(
            name,
            "flexq_apply",
            checkpoint=checkpoint,
            logical_key=logical_key,
            sources=sources,
            plan=plan,
            output_dtype=output_dtype,
            out=out,
        )
        who = self.describe(name)
        shape = plan.target.local_shape
        if result is None or not hasattr(result, "shape") or not hasattr(result, "dtype"):
            raise PluginError(f"{who}: apply for {logical_key!r} returned {type(result).__name__}")
        if tuple(result.shape) != tuple(shape):
            raise PluginError(
                f"{who}: apply for {logical_key!r} returned shape {tuple(result.shape)}, "
                f"expected {tuple(shape)}"
            )
        if name == passthrough.NAME:
            return result  # passthrough tensors keep their own dtype until the cast
        kind = str(result.dtype).removeprefix("paddle.").lower()
        allowed = _FLOAT_RESULTS | {output_dtype}
        if kind not in allowed and not (kind == "uint16" and output_dtype == "bfloat16"):
            raise PluginError(
                f"{who}: apply for {logical_key!r} returned dtype {kind}; a format returns "
                f"float32 or the output dtype ({output_dtype})"
            )
        return result

    def encoders(self) -> list[str]:
        """Working formats that can write checkpoints (``flexq_encode``)."""
        return [n for n in self.active() if self.implements(n, "flexq_encode")]

    def encode(
        self,
        name: str,
        directory: Path,
        weights: Mapping[str, np.ndarray],
        others: Mapping[str, RawTensor],
    ) -> float | None:
        """Write a checkpoint in format ``name``; its promised logits cosine (None: cannot)."""
        result = self._call(
            name, "flexq_encode", directory=directory, weights=weights, others=others
        )
        return None if result is None else float(result)


registry = FormatRegistry()


def register_format(plugin: object, name: str | None = None) -> str:
    """Register a format plugin object at run time; returns the name it got.

    :raises PluginError: on a duplicate name or a misspelled hook implementation.
    """
    return registry.register(plugin, name)


def unregister_format(name: str) -> None:
    """Remove a registered format by name."""
    registry.unregister(name)


def list_formats() -> list[FormatInfo]:
    """Installed and registered formats: name, version, distribution, source, description,
    the config methods each decodes."""
    return registry.rows()
