"""flexq's plugin system: the hook specifications, the registry, the passthrough owner.

Format authors need :data:`hookimpl` (also exported as ``flexq.hookimpl``) and
the hook signatures in :mod:`flexq.plugin.spec`; the registry
(:mod:`flexq.plugin.manager`) is the core's.
"""

from __future__ import annotations

from flexq.plugin.spec import NAME, hookimpl, hookspec

__all__ = ["NAME", "hookimpl", "hookspec"]
