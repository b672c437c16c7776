"""Hypothesis strategies shared by format tests (imports hypothesis: tests only).

For format authors' property tests: :func:`box_in` draws a box of a tensor (what one
shard of a sharded load holds), so every format's "a local plan equals the slice of
the whole" test draws its boxes the same way; :func:`examples` is the settings of a
property test that runs over decoders (no deadline: a first call compiles and warms).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp


@st.composite
def box_in(draw: st.DrawFn, shape: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A non-empty box ``(offset, local_shape)`` inside ``shape`` (every dim >= 1)."""
    offset = tuple(draw(st.integers(0, d - 1)) for d in shape)
    local = tuple(draw(st.integers(1, d - o)) for d, o in zip(shape, offset, strict=True))
    return offset, local


@st.composite
def case_and_box(
    draw: st.DrawFn, shapes: Sequence[Sequence[int]]
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """``(i, offset, local_shape)``: one of a test's fixed cases (by index into their
    ``shapes``) and a non-empty box inside its shape."""
    case = draw(st.integers(0, len(shapes) - 1))
    offset, local = draw(box_in(shapes[case]))
    return case, offset, local


def any_shape(*, side: int, row: int, rank: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    """A tensor shape of 1 to ``rank`` dims: up to ``side`` per dim, or one dim of up to
    ``row`` (a long flat run: blocks that cross rows are the flat layouts' hard case)."""
    many = hnp.array_shapes(min_dims=2, max_dims=rank, min_side=1, max_side=side)
    return many | hnp.array_shapes(min_dims=1, max_dims=1, min_side=1, max_side=row)


@st.composite
def codes_and_scale(
    draw: st.DrawFn,
    *,
    side: int,
    rank: int,
    scales: st.SearchStrategy[float],
    band: int,
    fewer_scale_dims: bool = False,
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(codes, scale, band)`` for a property test of a table-times-scale decode: uint8
    codes of any shape (up to ``rank`` dims of up to ``side``), a float32 scale that
    broadcasts to it (each dim 1 or the codes' size; with ``fewer_scale_dims``, sometimes
    fewer leading dims) drawn from ``scales``, and a band size in codes up to ``band``."""
    shape = tuple(draw(st.lists(st.integers(1, side), min_size=1, max_size=rank)))
    codes = draw(hnp.arrays(np.uint8, shape))
    scale_shape = tuple(draw(st.sampled_from([1, n])) for n in shape)
    if fewer_scale_dims:
        scale_shape = scale_shape[draw(st.integers(0, len(shape) - 1)) :]
    scale = draw(hnp.arrays(np.float32, scale_shape, elements=scales))
    return codes, scale, draw(st.integers(1, band))


@st.composite
def box_case(draw: st.DrawFn, shape: Sequence[int]) -> dict[str, Any]:
    """The common keys of one property-test case: a box inside ``shape`` (``offset``,
    ``local``) and a ``seed`` for the case's random data."""
    offset, local = draw(box_in(shape))
    return {"offset": offset, "local": local, "seed": draw(st.integers(0, 2**32 - 1))}


def examples(count: int) -> settings:
    """``@examples(200)``: hypothesis settings for ``count`` examples with no deadline,
    allowing function-scoped fixtures (``tmp_path``, ``monkeypatch``: each example uses
    them as scratch, resetting what it changes) and slow data generation."""
    return settings(
        max_examples=count,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
