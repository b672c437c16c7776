"""The format registry: installed formats (entry points) plus formats registered at run time.

Entry points in the group ``flexq`` are discovered lazily, once, on first use.
``FLEXQ_FORMATS`` (comma-separated names) limits which entry points load;
``FLEXQ_DISABLED_FORMATS`` blocks names. A format whose entry point fails to
import is kept as *broken*: it is listed with its error, the other formats keep
working, and only asking for it by name raises.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Literal

import pluggy

from flexq import spec
from flexq.errors import FlexqError, PluginError

ENTRY_POINT_GROUP = spec.NAME
ALLOW_ENV = "FLEXQ_FORMATS"
BLOCK_ENV = "FLEXQ_DISABLED_FORMATS"


@dataclass(frozen=True)
class FormatInfo:
    """One row of :func:`list_formats`."""

    name: str
    version: str
    distribution: str
    source: Literal["entry point", "runtime"]
    description: str
    #: why the format could not be loaded (None when it works).
    error: str | None = None


def _env_names(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def _describe(plugin: object) -> str:
    doc = (getattr(plugin, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


class FormatRegistry:
    """Wraps pluggy's PluginManager with flexq's discovery and bookkeeping rules."""

    def __init__(self) -> None:
        self._pm: pluggy.PluginManager | None = None
        self._infos: dict[str, FormatInfo] = {}

    @property
    def manager(self) -> pluggy.PluginManager:
        """The plugin manager, with entry points loaded on first access."""
        if self._pm is None:
            self._pm = pluggy.PluginManager(spec.NAME)
            self._pm.add_hookspecs(spec)
            self._load_entry_points()
        return self._pm

    def _load_entry_points(self) -> None:
        allow, block = _env_names(ALLOW_ENV), _env_names(BLOCK_ENV) or set()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in block or (allow is not None and ep.name not in allow):
                continue
            dist = ep.dist.name if ep.dist else "?"
            version = ep.dist.version if ep.dist else ""
            try:
                plugin = ep.load()
                self._add(plugin, ep.name)
            except PluginError as exc:
                self._infos[ep.name] = FormatInfo(
                    ep.name, version, dist, "entry point", "", str(exc)
                )
                continue
            except Exception as exc:
                error = f"format {ep.name!r} from {dist}: entry point {ep.value} failed: {exc!r}"
                self._infos[ep.name] = FormatInfo(ep.name, version, dist, "entry point", "", error)
                continue
            self._infos[ep.name] = FormatInfo(
                ep.name, version, dist, "entry point", _describe(plugin)
            )

    def _add(self, plugin: object, name: str) -> None:
        pm = self.manager
        try:
            pm.register(plugin, name=name)
            pm.check_pending()
        except pluggy.PluginValidationError as exc:
            if pm.get_plugin(name) is not None:
                pm.unregister(name=name)
            raise PluginError(f"format {name!r}: {exc}") from None

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register ``plugin`` under ``name`` (default: its ``FORMAT_NAME`` or ``__name__``)."""
        name = name or getattr(plugin, "FORMAT_NAME", None) or getattr(plugin, "__name__", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"cannot tell the name of format plugin {plugin!r}; pass name=")
        if name in self._infos or self.manager.get_plugin(name) is not None:
            raise PluginError(f"a format named {name!r} is already registered")
        self._add(plugin, name)
        version = str(getattr(plugin, "__version__", ""))
        self._infos[name] = FormatInfo(name, version, "", "runtime", _describe(plugin))
        return name

    def unregister(self, name: str) -> None:
        """Remove the format ``name`` (entry point or runtime)."""
        if name not in self._infos:
            raise PluginError(f"no format named {name!r} is registered")
        del self._infos[name]
        if self.manager.get_plugin(name) is not None:
            self.manager.unregister(name=name)

    def rows(self) -> list[FormatInfo]:
        """Every known format, working or broken, sorted by name."""
        self.manager  # noqa: B018 - discovery happens on first access
        return sorted(self._infos.values(), key=lambda i: i.name)

    def active(self, names: list[str] | None = None) -> list[str]:
        """Names of the working formats to use: all of them, or exactly ``names``."""
        working = [i.name for i in self.rows() if i.error is None]
        if names is None:
            return working
        for n in names:
            info = self._infos.get(n)
            if info is None:
                raise PluginError(f"format {n!r} is not installed (installed: {working})")
            if info.error is not None:
                raise PluginError(info.error)
        return list(names)

    def implements(self, plugin_name: str, hook_name: str) -> bool:
        """Whether format ``plugin_name`` implements ``hook_name``."""
        return self._impl(plugin_name, hook_name) is not None

    def call(self, plugin_name: str, hook_name: str, **kwargs: Any) -> Any:
        """Call one format's implementation of a hook (None if it has none).

        Only the owner of a logical tensor is asked about it, so per-tensor hooks
        are routed here instead of broadcast through ``pm.hook``. Anything but a
        :class:`FlexqError` escaping the plugin becomes a :class:`PluginError`
        naming the format and its distribution.
        """
        impl = self._impl(plugin_name, hook_name)
        if impl is None:
            return None
        try:
            return impl.function(**{a: kwargs[a] for a in impl.argnames})
        except FlexqError:
            raise
        except Exception as exc:
            raise PluginError(
                f"{self.describe(plugin_name)}: {hook_name} raised {type(exc).__name__}: {exc}"
            ) from exc

    def describe(self, name: str) -> str:
        """``format 'x' (distribution)`` for error messages (no distribution when registered
        at run time)."""
        info = self._infos.get(name)
        dist = f" ({info.distribution})" if info and info.distribution else ""
        return f"format {name!r}{dist}"

    def _impl(self, plugin_name: str, hook_name: str) -> Any:
        for impl in getattr(self.manager.hook, hook_name).get_hookimpls():
            if impl.plugin_name == plugin_name:
                return impl
        return None


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
    """Installed and registered formats: name, version, distribution, source, description."""
    return registry.rows()
