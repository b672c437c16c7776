"""pluggy's markers for the project name ``flexq``: what marks a hook and its implementations.

The bottom of the house, so both the hook specifications (:mod:`flexq.plugin.spec`)
and the format kit's generic :class:`flexq.formatkit.Format` can mark functions.
Format authors use ``flexq.hookimpl``.
"""

from __future__ import annotations

import pluggy

#: The pluggy project name (and the entry-point group formats register in).
NAME = "flexq"
hookspec = pluggy.HookspecMarker(NAME)
hookimpl = pluggy.HookimplMarker(NAME)
