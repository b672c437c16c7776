"""Old path of :mod:`flexq.testing.plans` (moved to the conformance suite); the same module."""

from __future__ import annotations

import sys

from flexq.testing import plans as _moved
from flexq.testing.plans import *  # noqa: F403  (its public names, for type checkers)

sys.modules[__name__] = _moved  # this path IS the module: imports and monkeypatches agree
