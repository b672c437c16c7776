"""Old import path of :mod:`flexq.numerics.bands`, kept for existing imports.

The shared numerics moved below the plugin layer so the core does not import the
authors' kit; format authors import from :mod:`flexq.formatkit` itself.
"""

from __future__ import annotations

import sys

from flexq.numerics import bands as _moved
from flexq.numerics.bands import (
    RUNS_PER_TASK as RUNS_PER_TASK,
)
from flexq.numerics.bands import (
    Band as Band,
)
from flexq.numerics.bands import (
    BandWork as BandWork,
)
from flexq.numerics.bands import (
    banded_lookup as banded_lookup,
)
from flexq.numerics.bands import (
    for_bands as for_bands,
)
from flexq.numerics.bands import (
    for_row_runs as for_row_runs,
)
from flexq.numerics.bands import (
    lookup_into as lookup_into,
)
from flexq.numerics.bands import (
    lookup_scaled as lookup_scaled,
)
from flexq.numerics.bands import (
    pair_items as pair_items,
)
from flexq.numerics.bands import (
    pairable as pairable,
)
from flexq.numerics.bands import (
    row_runs as row_runs,
)

# This path IS the moved module, not a copy of its names: a test that monkeypatches
# a constant here (``_BAND_CODES``) patches what the code reads; the names above are
# for type checkers.
sys.modules[__name__] = _moved
