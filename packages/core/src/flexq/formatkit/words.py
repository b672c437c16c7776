"""Old path of :mod:`flexq.numerics.words` (moved below the plugin layer, so the array
operations unpack packed words with the one unpacker); the same module."""

from __future__ import annotations

import sys

from flexq.numerics import words as _moved
from flexq.numerics.words import *  # noqa: F403  (its public names, for type checkers)

sys.modules[__name__] = _moved  # this path IS the module: imports and monkeypatches agree
