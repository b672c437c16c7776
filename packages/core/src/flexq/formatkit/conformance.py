"""Old import path of :mod:`flexq.testing.plans`, kept for existing imports.

The conformance check of read plans moved to :mod:`flexq.testing` with the rest of
the conformance suite; :mod:`flexq.formatkit` still re-exports its names.
"""

from __future__ import annotations

import sys

from flexq.testing import plans as _moved
from flexq.testing.plans import (
    METADATA_NAMES as METADATA_NAMES,
)
from flexq.testing.plans import (
    SCALE_NAMES as SCALE_NAMES,
)
from flexq.testing.plans import (
    ZERO_POINT_NAMES as ZERO_POINT_NAMES,
)
from flexq.testing.plans import (
    check_conformance as check_conformance,
)
from flexq.testing.plans import (
    scale_like as scale_like,
)
from flexq.testing.plans import (
    undeclared as undeclared,
)

# This path IS the moved module (as for the numerics' old paths).
sys.modules[__name__] = _moved
