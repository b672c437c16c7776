"""A decode to time, for the format packages' benches (``packages/format-*/bench``).

Each bench times ``ComposedTransform.dequantize`` of one logical tensor from sources
already in memory into an output written before (as a model's parameters are, and as
memcpy's destination is); a bfloat16 output goes through one float32 work array, as
``flexq.load_state_dict`` does for bfloat16 host targets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from flexq.compose import ComposedTransform
    from flexq.plan import ReadPlan


def dequantizer(
    ct: ComposedTransform,
    key: str,
    plan: ReadPlan,
    sources: Mapping[str, np.ndarray],
    dtype: str = "float32",
) -> Callable[[], object]:
    """A call that dequantizes ``key``'s ``plan`` box into ``dtype`` (float32 or bfloat16),
    its output and work array allocated and written once, here."""
    shape = tuple(int(d) for d in plan.target.local_shape)
    if dtype == "float32":
        into = np.ones(shape, np.float32)
        return lambda: ct.dequantize(key, sources, plan, "float32", out=into)
    into16, work = np.ones(shape, np.uint16), np.ones(shape, np.float32)
    return lambda: ct.dequantize(key, sources, plan, dtype, out=into16, scratch=work)
