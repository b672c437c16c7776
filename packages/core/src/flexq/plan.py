"""The value types formats and the composer exchange: logical tensors, target slices, read plans.

A *logical tensor* is what a model sees (``X.weight`` of shape [out, in]); its
*sources* are the physical checkpoint tensors it is built from. A *target
slice* is the box of a logical tensor one rank wants (Paddle's
``LocalTensorMetadata``). A *read plan* says which boxes of which sources are
needed to produce that box.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from flexq.numerics.sources import BoxSources

#: A box of a tensor: (global_offset, local_shape).
Box = tuple[tuple[int, ...], tuple[int, ...]]


class SourceSlice(NamedTuple):
    """The box of a source tensor a plan reads: a ``(global_offset, local_shape)`` pair
    that also reads as an object with those attributes (as upstream Paddle's loader
    reads plan values)."""

    global_offset: tuple[int, ...]
    local_shape: tuple[int, ...]


@dataclass(frozen=True)
class LogicalTensor:
    """Shape and natural dtype of one logical tensor a format offers.

    :ivar shape: global shape of the logical tensor.
    :ivar dtype: Paddle dtype name (no ``paddle.`` prefix) of the values when no
        output dtype is asked for, e.g. ``"bfloat16"``.
    """

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class TargetSlice:
    """The box of a logical tensor one target shard holds (Paddle's LocalTensorMetadata).

    :ivar dtype: Paddle dtype name of the target, without the ``paddle.`` prefix.
    """

    global_shape: tuple[int, ...]
    local_shape: tuple[int, ...]
    global_offset: tuple[int, ...]
    dtype: str

    @classmethod
    def whole(cls, shape: Sequence[int], dtype: str) -> TargetSlice:
        """The slice that covers the whole tensor."""
        return cls(tuple(shape), tuple(shape), (0,) * len(shape), dtype)

    @property
    def is_whole(self) -> bool:
        return self.local_shape == self.global_shape and not any(self.global_offset)

    @property
    def box(self) -> Box:
        return self.global_offset, self.local_shape


@dataclass(frozen=True)
class ReadPlan:
    """Which source boxes produce ``target`` (duck-types Paddle's read plan).

    :ivar mode: ``"local"``: apply() receives exactly the ``source_slices`` boxes
        and returns the ``target`` box; ``"global"``: apply() receives whole
        sources and returns the whole logical tensor.
    :ivar source_slices: source key -> :class:`SourceSlice` to read (plans may be
        built with plain ``(global_offset, local_shape)`` pairs; they are kept as
        SourceSlice).
    :ivar target: the box of the logical tensor this plan produces.
    :ivar scales: the sources that are scales the core may check before anything is
        written (each decodes by its stored dtype with
        :func:`flexq.formatkit.scale_to_float32`): a load reads and checks them for
        every piece first, so a NaN or infinite scale fails the load (when
        ``FLEXQ_NONFINITE_SCALES=error``) before any target is touched. A format
        that declares its scales here does not call ``check_scales`` itself. Every
        scale-like source (scales, global scales, absmax, SCB, float zero points) must be
        declared here or in ``checks``: :func:`flexq.formatkit.check_conformance` fails
        a format whose plan omits one.
    :ivar checks: the other sources ``check`` reads (g_idx, weight_shape, code books,
        integer-coded scales): read with the scales before the first write.
    :ivar check: the format's own check of what ``scales`` and ``checks`` hold, called
        with a :class:`flexq.formatkit.BoxSources` of exactly those boxes, after the
        core's non-finite check and before anything is written (and before every
        decode that does not go through a load). It raises :class:`flexq.FormatError`
        (or warns with :func:`flexq.formatkit.check_scales`) naming the component that
        is wrong, so the format's decode need not check again.
    """

    mode: Literal["local", "global"]
    source_slices: Mapping[str, Box]
    target: TargetSlice
    scales: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    check: Callable[[BoxSources], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        slices = {
            k: SourceSlice(tuple(o), tuple(s)) for k, (o, s) in dict(self.source_slices).items()
        }
        object.__setattr__(self, "source_slices", slices)

    def reads_within(self, other: ReadPlan) -> bool:
        """Whether every box this plan reads lies inside a box ``other`` reads of the
        same source."""
        return all(
            key in other.source_slices
            and box_inside(
                [o - h for o, h in zip(offset, other.source_slices[key][0], strict=True)],
                shape,
                other.source_slices[key][1],
            )
            for key, (offset, shape) in self.source_slices.items()
        )

    @property
    def checked(self) -> tuple[str, ...]:
        """Every source read before the first write: ``scales`` then ``checks``."""
        return tuple(dict.fromkeys((*self.scales, *self.checks)))


def box_inside(offset: Sequence[int], shape: Sequence[int], full: Sequence[int]) -> bool:
    """Whether the box ``offset`` + ``shape`` lies inside a tensor of shape ``full``."""
    return (
        len(offset) == len(full)
        and len(shape) == len(full)
        and all(
            o >= 0 and n >= 0 and o + n <= d for o, n, d in zip(offset, shape, full, strict=True)
        )
    )


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers (the number of blocks of ``b`` covering ``a``)."""
    return -(-a // b)


def block_cover(offset: int, size: int, block: int, extent: int) -> tuple[int, int]:
    """Blocks of ``block`` elements (ceil grid over ``extent``) covering [offset, offset+size).

    :return: (first block index, number of blocks). Zero blocks for an empty range.
    """
    if size == 0:
        return offset // block if block else 0, 0
    first = offset // block
    last = min(offset + size - 1, extent - 1) // block
    return first, last - first + 1
