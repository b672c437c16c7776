"""Old import path of :mod:`flexq.numerics.elements`, kept for existing imports.

The shared numerics moved below the plugin layer so the core does not import the
authors' kit; format authors import from :mod:`flexq.formatkit` itself.
"""

from __future__ import annotations

import sys

from flexq.numerics import elements as _moved
from flexq.numerics.elements import (
    E2M1_PAIRS as E2M1_PAIRS,
)
from flexq.numerics.elements import (
    E2M1_VALUES as E2M1_VALUES,
)
from flexq.numerics.elements import (
    E4M3_TO_FLOAT32 as E4M3_TO_FLOAT32,
)
from flexq.numerics.elements import (
    E8M0_TO_FLOAT32 as E8M0_TO_FLOAT32,
)
from flexq.numerics.elements import (
    nibble_pairs as nibble_pairs,
)

# This path IS the moved module, not a copy of its names: a test that monkeypatches
# a constant here (``_BAND_CODES``) patches what the code reads; the names above are
# for type checkers.
sys.modules[__name__] = _moved
