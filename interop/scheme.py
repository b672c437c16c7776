"""One row of the interop expectation table and the checkpoint it built, for
interop/schemes.py and the ``interop/*_schemes.py`` modules format packages carry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .producers.base import Built

Builder = Callable[[Path, Path], Built]


@dataclass(frozen=True)
class Scheme:
    """One row of the table.

    :ivar fmt: the flexq format (entry-point name) that must decode it.
    :ivar method: what a refusal names when ``fmt`` is missing (a ``quant_method``
        or a compressed-tensors ``format``).
    :ivar tolerance: bound on ||reference - original|| / ||original|| per weight,
        a check of the oracle itself (a wrong zero point or pack order is far off).
    """

    name: str
    build: Builder
    fmt: str
    method: str
    tolerance: float


@dataclass(frozen=True)
class Product:
    """A scheme and the checkpoint its producer built for this session."""

    scheme: Scheme
    built: Built
