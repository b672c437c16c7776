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
:class:`PluginError` naming it and the hook instead of deep inside a load. A
result of the wrong type also disables the format for the rest of the process
(:meth:`FormatRegistry.disabled` tells; :func:`flexq.compose` then warns once and
goes on with the other formats).

Discovery runs under a lock and the plugin manager is published only once every
entry point is loaded, so threads making a process's first flexq calls all see
every format. Two distributions offering one format name keep the first-party
one (:data:`flexq.plugin.known.FIRST_PARTY`), with one warning naming both.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib.metadata import EntryPoint
from typing import TYPE_CHECKING, Any, Literal

import pluggy

from flexq.errors import FlexqError, PluginError, PluginWarning
from flexq.plan import LogicalTensor, ReadPlan, TargetSlice, box_inside
from flexq.plugin import passthrough, spec
from flexq.plugin.checks import api_version_problem, as_names, logical_problem, shown
from flexq.plugin.discovery import group_entry_points, kept_entry_point, name_and_version
from flexq.plugin.pluginmanager import PluginManager

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


def _envas_names(var: str) -> set[str] | None:
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
        # Discovery, registration and disabling change the registry under this lock.
        # Re-entrant: discovery calls hooks (flexq_quant_methods), which may ask again.
        self._lock = threading.RLock()
        #: formats whose disabling was already warned about (one warning each).
        self._warned: set[str] = set()
        #: installed formats left out by ALLOW_ENV / BLOCK_ENV -> the setting that did it.
        self._env_excluded: dict[str, str] = {}

    # -- discovery --------------------------------------------------------------
    @property
    def manager(self) -> pluggy.PluginManager:
        """The plugin manager, with entry points loaded on first access (by one thread;
        the others wait and see it complete)."""
        pm = self._pm
        if pm is not None:
            return pm
        with self._lock:
            if self._pm is None:
                pm = PluginManager(spec.NAME)
                pm.add_hookspecs(spec)
                pm.register(passthrough, name=passthrough.NAME)
                self._infos[passthrough.NAME] = FormatInfo(
                    passthrough.NAME, "", "flexq", "builtin", _describe(passthrough)
                )
                notes = self._load_entry_points(pm)
                notes += [i.error for i in self._infos.values() if i.error is not None]
                self._pm = pm  # published only now: complete
                for note in notes:
                    warnings.warn(PluginWarning(note), stacklevel=2)
            return self._pm

    def _load_entry_points(self, pm: pluggy.PluginManager) -> list[str]:
        """Load every allowed entry point into ``pm``; returns the name-clash warnings
        (the formats that fail to load get their error in their row)."""
        allow, block = _envas_names(ALLOW_ENV), _envas_names(BLOCK_ENV) or set()
        found = group_entry_points(spec.NAME)
        unknown = sorted((allow or set()) - set(found.names))
        if unknown:
            self._allow_error = (
                f"{ALLOW_ENV}={os.environ[ALLOW_ENV]!r} names {', '.join(map(repr, unknown))}, "
                f"which no installed format provides (installed: {sorted(found.names)})"
            )
        by_name: dict[str, list[EntryPoint]] = {}
        for ep in found:
            by_name.setdefault(ep.name, []).append(ep)
        notes = []
        for name, eps in by_name.items():
            if name in block or (allow is not None and name not in allow):
                var = BLOCK_ENV if name in block else ALLOW_ENV
                self._env_excluded[name] = f"{var}={os.environ[var]!r}"
                continue
            ep, clash = kept_entry_point(name, eps)
            if clash is not None:
                notes.append(clash)
            self._infos[name] = self._load_one(pm, ep)
        return notes

    def _load_one(self, pm: pluggy.PluginManager, ep: EntryPoint) -> FormatInfo:
        """Import and register one entry point; a failure is the format's error row."""
        dist, version = name_and_version(ep)
        broken = FormatInfo(ep.name, version, dist, "entry point", "")
        self._infos[ep.name] = broken  # so messages name the distribution
        try:
            plugin = ep.load()
            problem = api_version_problem(plugin)
            if problem is not None:
                return replace(
                    broken,
                    error=f"format {ep.name!r} from {dist} {problem}; it is disabled "
                    f"(install a release of {dist} built for kit API {spec.API_VERSION})",
                )
            self._add(pm, plugin, ep.name)
        except PluginError as exc:
            return replace(broken, error=str(exc))
        except Exception as exc:
            return replace(
                broken,
                error=f"format {ep.name!r} from {dist}: entry point {ep.value} failed: {exc!r}",
            )
        return self._with_methods(pm, replace(broken, description=_describe(plugin)))

    @staticmethod
    def _add(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
        try:
            pm.register(plugin, name=name)
            pm.check_pending()
        except (pluggy.PluginValidationError, ValueError) as exc:
            if pm.get_plugin(name) is not None:
                pm.unregister(name=name)
            raise PluginError(f"format {name!r}: {exc}") from None

    def _with_methods(self, pm: pluggy.PluginManager, info: FormatInfo) -> FormatInfo:
        self._infos[info.name] = info
        try:
            methods = tuple(sorted(self._quant_methods(pm, info.name)))
        except FlexqError as exc:
            if pm.get_plugin(info.name) is not None:
                pm.unregister(name=info.name)
            return replace(info, error=str(exc))
        return replace(info, methods=methods)

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register ``plugin`` under ``name`` (default: its ``FORMAT_NAME`` or ``__name__``)."""
        name = name or getattr(plugin, "FORMAT_NAME", None) or getattr(plugin, "__name__", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"cannot tell the name of format plugin {plugin!r}; pass name=")
        pm = self.manager
        with self._lock:
            if name in self._infos or pm.get_plugin(name) is not None:
                raise PluginError(f"a format named {name!r} is already registered")
            problem = api_version_problem(plugin)
            if problem is not None:
                raise PluginError(f"format {name!r} {problem}; it is not registered")
            self._add(pm, plugin, name)
            version = str(getattr(plugin, "__version__", ""))
            info = self._with_methods(
                pm, FormatInfo(name, version, "", "runtime", _describe(plugin))
            )
            if info.error is not None:
                del self._infos[name]
                raise PluginError(info.error)
            self._infos[name] = info
            self._warned.discard(name)
        return name

    def unregister(self, name: str) -> None:
        """Remove the format ``name`` (entry point or runtime)."""
        pm = self.manager
        with self._lock:
            if name not in self._infos or name == passthrough.NAME:
                raise PluginError(f"no format named {name!r} is registered")
            del self._infos[name]
            if pm.get_plugin(name) is not None:
                pm.unregister(name=name)

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

    def excluded_by_env(self, name: str) -> str | None:
        """The variable setting (``FLEXQ_DISABLED_FORMATS='fp8'``) that kept installed
        format ``name`` from loading, or None when none did."""
        self.manager  # noqa: B018
        return self._env_excluded.get(name)

    def describe(self, name: str) -> str:
        """``format 'x' (distribution)`` for error messages (no distribution when registered
        at run time)."""
        info = self._infos.get(name)
        dist = f" ({info.distribution})" if info and info.distribution else ""
        return f"format {name!r}{dist}"

    def implements(self, name: str, hook: str) -> bool:
        """Whether format ``name`` implements hook ``hook`` (e.g. ``"flexq_encode"``)."""
        return any(i.plugin_name == name for i in getattr(self.manager.hook, hook).get_hookimpls())

    def deferrable(self, name: str) -> bool:
        """Whether :func:`flexq.compose` may leave installed format ``name`` unasked for a
        checkpoint whose config names none of its methods and whose other tensors are
        plain floats (a :class:`flexq.formatkit.Format` from an entry point: it claims
        only quantized tensors; unasked, its modules are never imported)."""
        info = self._infos.get(name)
        plugin = self.manager.get_plugin(name)
        return (
            info is not None
            and info.source == "entry point"
            and getattr(plugin, "FLEXQ_DEFERRABLE", False) is True
        )

    def disabled(self, name: str) -> bool:
        """Whether format ``name`` was disabled for returning a result of the wrong type."""
        info = self._infos.get(name)
        return info is not None and info.error is not None

    def warn_disabled(self, name: str) -> None:
        """One :class:`PluginWarning` (per process and format) that ``name`` is disabled."""
        with self._lock:
            info = self._infos.get(name)
            if info is None or info.error is None or name in self._warned:
                return
            self._warned.add(name)
        warnings.warn(PluginWarning(f"{info.error}; the other formats keep working"), stacklevel=3)

    def _wrong_result(self, name: str, hook: str, what: str) -> PluginError:
        """Disable format ``name`` (hook ``hook`` returned ``what``) and return the error
        saying so; the format's tensors are then nobody's until it is fixed."""
        return self._disable(name, f"{self.describe(name)}: {hook} returned {what}")

    def _disable(self, name: str, why: str) -> PluginError:
        """Disable format ``name`` for ``why`` and return the error saying so."""
        info = self._infos.get(name)
        fix = f"fix or uninstall {info.distribution}" if info and info.distribution else "fix it"
        error = f"{why}; the format is disabled ({fix})"
        with self._lock:
            info = self._infos.get(name)
            if info is not None and info.error is None and name != passthrough.NAME:
                self._infos[name] = replace(info, error=error)
                pm = self._pm
                if pm is not None and pm.get_plugin(name) is not None:
                    pm.unregister(name=name)
        return PluginError(error)

    # -- one checked method per hook ----------------------------------------------
    def _call(self, name: str, hook: str, **kwargs: Any) -> Any:
        return self._call_with(self.manager, name, hook, kwargs)

    def _call_with(
        self, pm: pluggy.PluginManager, name: str, hook: str, kwargs: dict[str, Any]
    ) -> Any:
        """``pm.hook.<hook>`` restricted to format ``name``; a non-flexq exception escaping
        the plugin becomes a :class:`PluginError` naming the format."""
        if self.disabled(name):
            raise PluginError(self._infos[name].error)
        with self._lock:
            others = [p for n, p in pm.list_name_plugin() if n != name and p is not None]
            caller = pm.subset_hook_caller(hook, others)
        try:
            return caller(**kwargs)
        except FlexqError:
            raise
        except ImportError as exc:
            # A part of a lazy format (flexq.formatkit.Format's "module:attribute") that
            # fails to import is a broken plugin, as if its entry point had failed.
            raise self._disable(name, f"{self.describe(name)}: {hook}: {exc}") from exc
        except Exception as exc:
            raise PluginError(
                f"{self.describe(name)}: {hook} raised {type(exc).__name__}: {exc}"
            ) from exc

    def quant_methods(self, name: str) -> frozenset[str]:
        """The config methods format ``name`` decodes."""
        return self._quant_methods(self.manager, name)

    def _quant_methods(self, pm: pluggy.PluginManager, name: str) -> frozenset[str]:
        hook = "flexq_quant_methods"
        found = self._call_with(pm, name, hook, {})
        methods = as_names(() if found is None else found)
        if methods is None:
            raise self._wrong_result(name, hook, f"{shown(found)}, not a collection of names")
        return methods

    def logical_metadata(self, name: str, checkpoint: Checkpoint) -> dict[str, LogicalTensor]:
        """The logical tensors format ``name`` claims in ``checkpoint``, checked."""
        hook = "flexq_logical_metadata"
        claimed = self._call(name, hook, checkpoint=checkpoint)
        if claimed is None:
            return {}
        if not isinstance(claimed, Mapping):
            raise self._wrong_result(name, hook, f"{shown(claimed)}, not a mapping")
        for key, meta in claimed.items():
            why = "a key that is not a str" if not isinstance(key, str) else logical_problem(meta)
            if why is not None:
                raise self._wrong_result(name, hook, f"an entry {key!r:.60} that {why}")
        return dict(claimed)

    def recognized_keys(self, name: str, checkpoint: Checkpoint) -> frozenset[str]:
        """Physical keys format ``name`` recognizes as its components, used or not."""
        hook = "flexq_recognized_keys"
        found = self._call(name, hook, checkpoint=checkpoint)
        keys = as_names(() if found is None else found)
        if keys is None:
            raise self._wrong_result(name, hook, f"{shown(found)}, not a collection of names")
        return keys

    def source_keys(self, name: str, checkpoint: Checkpoint, logical_key: str) -> tuple[str, ...]:
        """The physical components of ``logical_key``, checked to exist in ``checkpoint``."""
        hook = "flexq_source_keys"
        sources = self._call(name, hook, checkpoint=checkpoint, logical_key=logical_key)
        who = self.describe(name)
        if sources is None or (isinstance(sources, (list, tuple)) and not sources):
            raise PluginError(f"{who}: no source keys for logical tensor {logical_key!r}")
        if not isinstance(sources, (list, tuple)) or not all(isinstance(k, str) for k in sources):
            raise self._wrong_result(
                name, hook, f"{shown(sources)} for {logical_key!r}, not a sequence of names"
            )
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
            raise self._wrong_result(
                name, "flexq_read_plan", f"{shown(plan)} for {logical_key!r}, not a flexq.ReadPlan"
            )
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

    def decode(
        self,
        name: str,
        checkpoint: Checkpoint,
        logical_key: str,
        sources: Mapping[str, Any],
        plan: ReadPlan,
        output_dtype: str,
        out: Any,
        rounded_out: Any = None,
    ) -> Any:
        """Format ``name``'s decoded box for ``plan`` (its ``flexq_apply`` hook), checked:
        an array of the plan's box, floating point (float32 or ``output_dtype``)."""
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
            rounded_out=rounded_out,
        )
        who = self.describe(name)
        shape = plan.target.local_shape
        if result is None or not hasattr(result, "shape") or not hasattr(result, "dtype"):
            raise self._wrong_result(
                name, "flexq_apply", f"{type(result).__name__} for {logical_key!r}, not an array"
            )
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

    def open_container(self, path: str | os.PathLike[str]) -> Checkpoint | None:
        """``path`` opened by the first format whose container it is
        (``flexq_open_checkpoint``); None when it is no format's container."""
        from flexq.io.checkpoint import Checkpoint

        hook = "flexq_open_checkpoint"
        for name in self.active():
            if not self.implements(name, hook):
                continue
            found = self._call(name, hook, path=os.fspath(path))
            if found is None:
                continue
            if not isinstance(found, Checkpoint):
                raise self._wrong_result(name, hook, f"{shown(found)}, not a Checkpoint")
            return found
        return None

    def open_checkpoint(self, path: str | os.PathLike[str]) -> Checkpoint:
        """``path`` opened by the format whose container it is, else as a safetensors
        checkpoint."""
        from flexq.io.checkpoint import Checkpoint

        return self.open_container(path) or Checkpoint(path)

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
        hook = "flexq_encode"
        result = self._call(name, hook, directory=directory, weights=weights, others=others)
        if result is None:
            return None
        if isinstance(result, bool) or not isinstance(result, (int, float)):
            raise self._wrong_result(name, hook, f"{shown(result)}, not a cosine (float)")
        return float(result)


registry = FormatRegistry()


def register_format(plugin: object, name: str | None = None) -> str:
    """Register a format plugin object at run time; returns the name it got.

    :raises PluginError: on a duplicate name or a misspelled hook implementation.
    """
    return registry.register(plugin, name)


def unregister_format(name: str) -> None:
    """Remove a registered format by name."""
    registry.unregister(name)


def open_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """The checkpoint at ``path``: a container an installed format opens (GGUF), else
    a safetensors checkpoint (:class:`flexq.io.checkpoint.Checkpoint`)."""
    return registry.open_checkpoint(path)


def list_formats() -> list[FormatInfo]:
    """Installed and registered formats: name, version, distribution, source, description,
    the config methods each decodes."""
    return registry.rows()
