"""Old import path of :mod:`flexq.numerics.rounding`, kept for existing imports.

The shared numerics moved below the plugin layer so the core does not import the
authors' kit; format authors import from :mod:`flexq.formatkit` itself.
"""

from __future__ import annotations

import sys

from flexq.numerics import rounding as _moved
from flexq.numerics.rounding import (
    BF16_NEGATIVE_NAN as BF16_NEGATIVE_NAN,
)
from flexq.numerics.rounding import (
    BF16_QUIET_NAN as BF16_QUIET_NAN,
)
from flexq.numerics.rounding import (
    OVERFLOW_AT as OVERFLOW_AT,
)
from flexq.numerics.rounding import (
    OVERFLOW_ENV as OVERFLOW_ENV,
)
from flexq.numerics.rounding import (
    Overflow as Overflow,
)
from flexq.numerics.rounding import (
    _round_on_device as _round_on_device,
)
from flexq.numerics.rounding import (
    bfloat16_bits_to_float32 as bfloat16_bits_to_float32,
)
from flexq.numerics.rounding import (
    float32_to_bfloat16_bits as float32_to_bfloat16_bits,
)
from flexq.numerics.rounding import (
    round_numpy as round_numpy,
)
from flexq.numerics.rounding import (
    round_paddle as round_paddle,
)
from flexq.numerics.rounding import (
    saturating as saturating,
)
from flexq.numerics.rounding import (
    to_paddle as to_paddle,
)

# This path IS the moved module, not a copy of its names: a test that monkeypatches
# a constant here (``_BAND_CODES``) patches what the code reads; the names above are
# for type checkers.
sys.modules[__name__] = _moved
