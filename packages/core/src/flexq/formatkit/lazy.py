"""Names resolved on first use: how a format keeps its plugin object cheap to import.

For format authors and the kit itself. Discovery imports every installed format's
entry point in every process that touches flexq, so an entry point module should
define its :class:`flexq.formatkit.Format` (name, methods, version) without
importing the modules that do the work: pass them as ``"module:attribute"``
references (:func:`resolve` imports one when a hook first needs it), and let a
package ``__init__`` re-export its public names through :func:`exports` instead of
importing them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def resolve(ref: str) -> Any:
    """The object ``"package.module:attribute"`` names (importing the module).

    :raises ImportError: when the module cannot be imported or has no such attribute.
    """
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ImportError(f"{ref!r} is not a 'module:attribute' reference")
    found = import_module(module)
    try:
        return getattr(found, attr)
    except AttributeError:
        raise ImportError(f"module {module!r} has no attribute {attr!r} (from {ref!r})") from None


def exports(
    module: str, names: Mapping[str, str], renamed: Mapping[str, str] | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__`` giving each of ``names`` (public name -> the module that
    defines it) on first access, for a package ``__init__``::

        __getattr__ = exports(__name__, {"quantize": "flexq_fp8.encode"})

    ``renamed`` (old name -> its new name in ``names``) keeps old names working for code
    written before a rename: the old name gives the very object of the new one, silently
    (a plugin cannot change what its users' flexq calls it).
    """

    def __getattr__(name: str) -> Any:
        name = (renamed or {}).get(name, name)
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return getattr(import_module(where), name)

    return __getattr__
