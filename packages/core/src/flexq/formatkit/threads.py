"""Old import path of :mod:`flexq.numerics.threads`, kept for existing imports.

The shared numerics moved below the plugin layer so the core does not import the
authors' kit; format authors import from :mod:`flexq.formatkit` itself.
"""

from __future__ import annotations

import sys

from flexq.numerics import threads as _moved
from flexq.numerics.threads import (
    run_parts as run_parts,
)
from flexq.numerics.threads import (
    thread_count as thread_count,
)

# This path IS the moved module, not a copy of its names: a test that monkeypatches
# a constant here (``_BAND_CODES``) patches what the code reads; the names above are
# for type checkers.
sys.modules[__name__] = _moved
