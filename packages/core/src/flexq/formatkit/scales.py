"""Old import path of :mod:`flexq.numerics.scales`, kept for existing imports.

The shared numerics moved below the plugin layer so the core does not import the
authors' kit; format authors import from :mod:`flexq.formatkit` itself.
"""

from __future__ import annotations

import sys

from flexq.numerics import scales as _moved
from flexq.numerics.scales import (
    FLOAT_SCALE_DTYPES as FLOAT_SCALE_DTYPES,
)
from flexq.numerics.scales import (
    NONFINITE_SCALES_ENV as NONFINITE_SCALES_ENV,
)
from flexq.numerics.scales import (
    NONFINITE_SCALES_VALUES as NONFINITE_SCALES_VALUES,
)
from flexq.numerics.scales import (
    check_scales as check_scales,
)
from flexq.numerics.scales import (
    nonfinite_scales_policy as nonfinite_scales_policy,
)
from flexq.numerics.scales import (
    scale_to_float32 as scale_to_float32,
)

# This path IS the moved module, not a copy of its names: a test that monkeypatches
# a constant here (``_BAND_CODES``) patches what the code reads; the names above are
# for type checkers.
sys.modules[__name__] = _moved
