"""Old import path of :mod:`flexq.numerics.arrays`, kept for existing imports.

The shared numerics moved below the plugin layer so the core does not import the
authors' kit; format authors import from :mod:`flexq.formatkit` itself.
"""

from __future__ import annotations

import sys

from flexq.numerics import arrays as _moved
from flexq.numerics.arrays import (
    host_to_numpy as host_to_numpy,
)
from flexq.numerics.arrays import (
    host_view as host_view,
)
from flexq.numerics.arrays import (
    is_paddle as is_paddle,
)
from flexq.numerics.arrays import (
    on_cpu as on_cpu,
)
from flexq.numerics.arrays import (
    to_numpy as to_numpy,
)

# This path IS the moved module, not a copy of its names: a test that monkeypatches
# a constant here (``_BAND_CODES``) patches what the code reads; the names above are
# for type checkers.
sys.modules[__name__] = _moved
