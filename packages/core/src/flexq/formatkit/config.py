"""Old path of :mod:`flexq.quantconfig.base` (moved below the plugin layer, so the core's
detection reads configs without the kit); the same module."""

from __future__ import annotations

import sys

from flexq.quantconfig import base as _moved
from flexq.quantconfig.base import *  # noqa: F403  (its public names, for type checkers)

sys.modules[__name__] = _moved  # this path IS the module: imports and monkeypatches agree
