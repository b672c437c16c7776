"""Old path of :mod:`flexq.numerics.scales` (moved below the plugin layer); the same module."""

from __future__ import annotations

import sys

from flexq.numerics import scales as _moved
from flexq.numerics.scales import *  # noqa: F403  (its public names, for type checkers)

sys.modules[__name__] = _moved  # this path IS the module: imports and monkeypatches agree
