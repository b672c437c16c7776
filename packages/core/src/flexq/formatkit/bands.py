"""Old path of :mod:`flexq.numerics.bands` (moved below the plugin layer); the same module."""

from __future__ import annotations

import sys

from flexq.numerics import bands as _moved
from flexq.numerics.bands import *  # noqa: F403  (its public names, for type checkers)

sys.modules[__name__] = _moved  # this path IS the module: imports and monkeypatches agree
