"""One generic format plugin: a format is its analysis, its plan and its decode.

For format authors. Every format's hook implementations do the same thing:
claim what the analysis of a checkpoint found, name each tensor's sources,
plan a box, decode it. :class:`Format` implements the hooks once over three
functions a format writes (``analyze`` in ``detect.py``, ``plan`` in
``plan.py``, ``decode`` in ``decode.py``), so a format's ``plugin.py`` is one
object::

    plugin = Format(
        "int8row", "int8 weights, one float32 scale per row",
        methods=("int8row",), analyze=analyze, plan=local_plan, decode=decode,
    )

and its entry point names that object (``fp8 = "flexq_fp8.plugin:plugin"``; the
one-module example of docs/plugin-guide.md: ``int8row = "flexq_int8row:plugin"``).
A format that can write checkpoints passes ``encode`` (see :class:`Format`); an
:class:`Encoder` makes one from the format's quantizer, config and tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from flexq.errors import FormatError
from flexq.formatkit.lazy import resolve
from flexq.io.writer import save_checkpoint
from flexq.markers import hookimpl
from flexq.numerics.sources import BoxSources as BoxSources
from flexq.plan import LogicalTensor, ReadPlan, TargetSlice

if TYPE_CHECKING:
    from flexq.io.checkpoint import Checkpoint
    from flexq.io.writer import RawTensor


class FoundTensor(Protocol):
    """What the generic hooks read of one logical tensor a format found."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical tensor's shape (the producer's dequantized twin's)."""

    @property
    def dtype(self) -> str:
        """Its natural Paddle dtype name (``"bfloat16"`` ...)."""

    @property
    def sources(self) -> Sequence[str]:
        """The physical tensors it is built from."""


L = TypeVar("L", bound=FoundTensor)


@dataclass(frozen=True)
class Analysis(Generic[L]):
    """What a format found in one checkpoint.

    :ivar tensors: logical key -> its layout.
    :ivar recognized: every physical key that is this format's component, used or not
        (the core reports an unused one as an orphan).
    """

    tensors: Mapping[str, L]
    recognized: Collection[str] = frozenset()


#: Writes a checkpoint of the format into an empty directory; returns the smallest
#: logits cosine it promises (``flexq demo`` and the cross-package tests check it).
Encode = Callable[[Path, Mapping[str, np.ndarray], Mapping[str, "RawTensor"]], float]


@dataclass(frozen=True)
class Encoder:
    """An :data:`Encode` (a format's ``flexq_encode``) from its quantizer.

    Called with a directory, float32 weights and the other (passed-through) tensors,
    it writes the others and ``quantize(weights)`` with ``config`` as config.json and
    returns ``tolerance``.

    :ivar quantize: float32 weights by key -> the format's checkpoint tensors.
    :ivar config: the config.json to write (its ``quantization_config`` included).
    :ivar tolerance: the smallest logits cosine a model loaded from it keeps.
    """

    quantize: Callable[[Mapping[str, np.ndarray]], Mapping[str, RawTensor]]
    config: Mapping[str, Any]
    tolerance: float

    def __call__(
        self, directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, RawTensor]
    ) -> float:
        save_checkpoint(directory, {**others, **self.quantize(weights)}, config=self.config)
        return self.tolerance


class Format(Generic[L]):
    """The hook implementations of one format, over its analysis, plan and decode.

    :param name: the format's name (its entry point name).
    :param description: one line for ``flexq list-formats``.
    :param methods: the config methods it decodes (``flexq_quant_methods``).
    :param analyze: the checkpoint's tensors of this format, from headers and config
        (memoize it with :func:`flexq.formatkit.cached_per_checkpoint`); None or an empty
        analysis when the format is absent; raise :class:`flexq.FormatError` for
        tensors that are clearly this format's but broken.
    :param plan: the local read plan of a box of one tensor (declare its scales in
        ``ReadPlan.scales``), or None to read whole sources.
    :param decode: ``decode(layout, sources, out)``: the float32 box ``sources.target``
        from the planned :class:`BoxSources`; ``out`` is None or a float32 array of the box
        to fill.
    :param encode: optional: writes a checkpoint of the format (``flexq_encode``).
        Each of ``analyze``, ``plan``, ``decode`` and ``encode`` may instead be a
        ``"module:attribute"`` reference, imported on first use (a cheap entry point).
    :param api_version: the :data:`flexq.formatkit.API_VERSION` the format was built for
        (a literal such as ``"1.0"``, not the constant: it records what the code was
        written against); flexq disables a format built for another major version.
        None: built before the kit had a version (taken as major 1).
    """

    def __init__(
        self,
        name: str,
        description: str,
        *,
        methods: Sequence[str],
        analyze: Callable[[Checkpoint], Analysis[L] | None] | str,
        plan: Callable[[L, TargetSlice], ReadPlan | None] | str,
        decode: Callable[[L, BoxSources, Any], Any] | str,
        encode: Encode | str | None = None,
        api_version: str | None = None,
    ) -> None:
        self.FORMAT_NAME = name
        # It claims only tensors its config methods name or that look quantized, so the
        # composer need not import it for a checkpoint with neither.
        self.FLEXQ_DEFERRABLE = True
        self.FLEXQ_API_VERSION = api_version
        self.__doc__ = description
        self.methods = tuple(methods)
        self._parts: dict[str, Any] = {"analyze": analyze, "plan": plan, "decode": decode}
        if encode is not None:
            self._parts["encode"] = encode
            self.flexq_encode = _encoder(self._encode)

    def _part(self, which: str) -> Any:
        """The function ``which`` (``analyze`` ...), imported on first use when given as a
        reference; an import failure says which format and module (the registry
        disables the format)."""
        part = self._parts[which]
        if isinstance(part, str):
            try:
                part = resolve(part)
            except Exception as exc:
                raise ImportError(
                    f"format {self.FORMAT_NAME!r}: its {which} ({part}) failed to import: "
                    f"{exc!r}; reinstall the format's package"
                ) from exc
            self._parts[which] = part  # the same object for every thread: idempotent
        return part

    def _analyze(self, checkpoint: Checkpoint) -> Analysis[L] | None:
        found: Analysis[L] | None = self._part("analyze")(checkpoint)
        return found

    def _plan(self, layout: L, target: TargetSlice) -> ReadPlan | None:
        plan: ReadPlan | None = self._part("plan")(layout, target)
        return plan

    def _decode(self, layout: L, sources: BoxSources, out: Any) -> Any:
        return self._part("decode")(layout, sources, out)

    def _encode(
        self, directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, RawTensor]
    ) -> float:
        cosine: float = self._part("encode")(directory, weights, others)
        return cosine

    def layout(self, checkpoint: Checkpoint, logical_key: str) -> L:
        """The layout of a logical tensor this format claimed."""
        found = self._analyze(checkpoint)
        layout = found.tensors.get(logical_key) if found is not None else None
        if layout is None:
            raise FormatError(
                f"{checkpoint.path}: {logical_key!r} is not a tensor of format {self.FORMAT_NAME!r}"
            )
        return layout

    @hookimpl
    def flexq_quant_methods(self) -> tuple[str, ...]:
        return self.methods

    @hookimpl
    def flexq_logical_metadata(self, checkpoint: Checkpoint) -> dict[str, LogicalTensor]:
        found = self._analyze(checkpoint)
        if found is None:
            return {}
        return {k: LogicalTensor(tuple(t.shape), t.dtype) for k, t in found.tensors.items()}

    @hookimpl
    def flexq_recognized_keys(self, checkpoint: Checkpoint) -> Collection[str]:
        found = self._analyze(checkpoint)
        return found.recognized if found is not None else ()

    @hookimpl
    def flexq_source_keys(self, checkpoint: Checkpoint, logical_key: str) -> list[str]:
        return list(self.layout(checkpoint, logical_key).sources)

    @hookimpl
    def flexq_read_plan(
        self, checkpoint: Checkpoint, logical_key: str, target: TargetSlice, force_global: bool
    ) -> ReadPlan | None:
        layout = self.layout(checkpoint, logical_key)
        if not force_global:
            return self._plan(layout, target)
        # The whole sources, with what the plan of the whole tensor declares (scales,
        # checks), in one call: the core need not ask a second time.
        whole = TargetSlice.whole(target.global_shape, target.dtype)
        plan = self._plan(layout, whole)
        boxes = {s: ((0,) * len(checkpoint.info(s).shape), checkpoint.info(s).shape)
                 for s in layout.sources}  # fmt: skip
        if plan is None:
            return ReadPlan("global", boxes, whole)
        return ReadPlan("global", boxes, whole, plan.scales, plan.checks, plan.check)

    @hookimpl
    def flexq_apply(
        self,
        checkpoint: Checkpoint,
        logical_key: str,
        sources: Mapping[str, Any],
        plan: ReadPlan,
        out: Any,
        rounded_out: Any,
    ) -> Any:
        layout = self.layout(checkpoint, logical_key)
        missing = [k for k in layout.sources if k not in sources]
        if missing:
            raise FormatError(
                f"{checkpoint.path}: decoding {logical_key!r} needs {missing} "
                f"(format {self.FORMAT_NAME!r})"
            )
        return self._decode(layout, BoxSources(checkpoint, plan, sources, rounded_out), out)


def _encoder(encode: Encode) -> Callable[..., float]:
    """``encode`` as a ``flexq_encode`` hook implementation (a plain function attribute)."""

    @hookimpl
    def flexq_encode(
        directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, RawTensor]
    ) -> float:
        return encode(directory, weights, others)

    return flexq_encode
