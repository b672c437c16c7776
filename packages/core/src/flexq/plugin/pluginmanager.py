"""The registry's pluggy plugin manager: pluggy's, minus the look at Python's dunders.

For :class:`flexq.plugin.manager.FormatRegistry`. pluggy's ``register`` asks
``parse_hookimpl_opts`` about every name ``dir(plugin)`` gives, each through
``inspect.getattr_static``; for a :class:`flexq.formatkit.Format` object over half of
those names are ``object``'s dunders (``__init__``, ``__repr__``, ...), which no
hook implementation can be. Skipping them halves what registering the installed
formats costs every fresh process at discovery (about 2.6 of 5.5 ms CPU for ten
plugins, measured in issue 30); every other name, ``flexq_*`` or marked with a
``specname``, is parsed by pluggy as before.
"""

from __future__ import annotations

import pluggy
from pluggy import HookimplOpts


class PluginManager(pluggy.PluginManager):
    """pluggy's :class:`pluggy.PluginManager` that never parses a dunder name as a hook
    implementation."""

    def parse_hookimpl_opts(self, plugin: object, name: str) -> HookimplOpts | None:
        """pluggy's options for ``plugin.name``; None at once for ``__dunder__`` names."""
        if name.startswith("__") and name.endswith("__"):
            return None  # Python's protocol names, never flexq hooks
        return super().parse_hookimpl_opts(plugin, name)
