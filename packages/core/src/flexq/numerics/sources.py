"""The arrays one read plan fetched: what a format's decode step reads for one box.

For the core (the load path builds one per planned box) and for format authors
(:mod:`flexq.formatkit` re-exports it as ``BoxSources``). It lives below the plugin layer
because the core builds it and :mod:`flexq.plan` names it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from flexq.errors import FormatError

if TYPE_CHECKING:
    import numpy as np

    from flexq.io.checkpoint import Checkpoint
    from flexq.plan import ReadPlan, TargetSlice


class BoxSources(Mapping[str, Any]):
    """What a format's ``decode`` reads for one box: source key -> the array (numpy or
    Paddle) holding exactly the box ``plan`` names (the whole tensor for a global plan),
    with the checkpoint they came from (for messages) and the plan.

    Numpy arrays may be read-only views of the mapped file: read them, never write
    into them. ``decode(layout, sources, out)`` returns the float32 box
    ``sources.target``; ``out`` is None or a writable C-contiguous numpy float32 array
    of that box, which a decoder may fill and return (ignoring it is always correct).

    :ivar rounded_out: None, or for a bfloat16 target a writable C-contiguous uint16
        array of the box (often the target's own memory): a decoder whose math gives
        exactly the bits rounding its float32 result once would give may write them
        there and return it instead of float32 (kit API 1.2; ignoring it is always
        correct).
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        plan: ReadPlan,
        arrays: Mapping[str, Any],
        rounded_out: np.ndarray | None = None,
    ) -> None:
        self.checkpoint, self.plan, self._arrays = checkpoint, plan, arrays
        self.rounded_out = rounded_out

    def __getitem__(self, key: str) -> Any:
        return self._arrays[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    @property
    def target(self) -> TargetSlice:
        """The box of the logical tensor to produce."""
        return self.plan.target

    def offset(self, key: str) -> tuple[int, ...]:
        """Where source ``key``'s box starts in the stored tensor."""
        return tuple(self.plan.source_slices[key][0])

    def expect(
        self, shapes: Mapping[str, Sequence[int]], *, logical_key: str, format_name: str
    ) -> None:
        """Check that each source in ``shapes`` arrived in the shape the decoder needs.

        :raises FormatError: ``<file>: tensor 'k' arrived with shape (..), the plan for
            'x' needs (..) (format 'f')``.
        """
        for key, want in shapes.items():
            got = tuple(self[key].shape)
            if got != tuple(want):
                raise FormatError(
                    f"{self.checkpoint.info(key).file}: tensor {key!r} arrived with shape "
                    f"{got}, the plan for {logical_key!r} needs {tuple(want)} "
                    f"(format {format_name!r})"
                )
