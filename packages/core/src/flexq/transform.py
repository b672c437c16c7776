"""Paddle's upstream ``LoadTransform`` protocol over a composition: what Paddle calls.

For Paddle's ``load_state_dict(..., load_transform=...)`` (PR #79712) and for users who
hand it :func:`flexq.compose`'s result. :class:`ComposedTransform` holds a
:class:`~flexq.composition.Composition` and adds only the four protocol methods
(``logical_metadata``, ``source_keys``, ``read_plan``, ``apply``), ``read_plan_for``,
``declaring``, and the state Paddle's loader needs between its calls (the plans it
asked for, the dtypes to declare, the key it asked about last). flexq's own engines
take the composition itself; only ``engine="native"`` builds one of these, to hand
it to Paddle. The composition's read-only parts are forwarded, so code written
against ``flexq.compose(path).entries`` keeps working.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from flexq.composition import Composition
from flexq.io.dtypes import FLOAT_DTYPES, paddle_dtype_name
from flexq.numerics.arrays import host_to_numpy
from flexq.numerics.rounding import to_paddle
from flexq.plan import ReadPlan, TargetSlice

if TYPE_CHECKING:
    from flexq.composition import LogicalEntry
    from flexq.io.checkpoint import Checkpoint

#: A plan the adapter has made or been given: (logical key, asked box, force_global).
_Asked = tuple[str, TargetSlice, bool]
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _forwarded(
    method: Callable[Concatenate[Composition, _P], _R],
) -> Callable[Concatenate[ComposedTransform, _P], _R]:
    """``method`` of the adapter's composition, as a method of the adapter (same
    signature, same docstring): the composition's read-only parts, forwarded by name."""

    @functools.wraps(method)
    def forward(self: ComposedTransform, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return method(self.composition, *args, **kwargs)

    return forward


class ComposedTransform:
    """A :class:`~flexq.composition.Composition` as Paddle's ``LoadTransform``: each
    (logical key, target box) is planned once per adapter, the plan of the last
    ``read_plan`` per key is what the next ``apply`` builds."""

    def __init__(
        self,
        composition: Composition,
        *,
        declared: Mapping[str, str] | None = None,
        planned: Iterable[tuple[str, TargetSlice, ReadPlan]] = (),
    ) -> None:
        """:param declared: logical key -> the Paddle dtype ``logical_metadata()`` declares
            for it instead of its natural one (see :meth:`declaring`).
        :param planned: (logical key, box, the composition's plan of that box) already
            made, as the native engine's validation made them, so Paddle's ``read_plan``
            for the same box does not ask the format again."""
        self._composition = composition
        self._declared = dict(declared or {})
        #: every plan made or given, by what was asked (a format is asked once each).
        self._made: dict[_Asked, ReadPlan] = {(k, box, False): p for k, box, p in planned}
        #: logical key -> the plan the last read_plan() made (what its apply() builds).
        self._last: dict[str, ReadPlan] = {}
        #: logical keys whose last plan Paddle's loader asked for (with its metadata).
        self._for_paddle: set[str] = set()
        #: the logical key of the last read_plan() / apply() call (for error messages).
        self.current: str | None = None

    @property
    def composition(self) -> Composition:
        """The immutable composition this adapter presents to Paddle."""
        return self._composition

    # -- the composition's read-only parts, for code that used compose()'s result ----
    @property
    def checkpoint(self) -> Checkpoint:
        return self._composition.checkpoint

    @property
    def entries(self) -> dict[str, LogicalEntry]:
        return self._composition.entries

    @property
    def problems(self) -> list[str]:
        """What is wrong with the checkpoint (empty when compose() was strict)."""
        return self._composition.problems

    @property
    def formats(self) -> list[str]:
        """The formats that were asked."""
        return self._composition.formats

    entry = _forwarded(Composition.entry)
    #: :meth:`Composition.plan`: a fresh plan (the adapter's own are its protocol's).
    plan = _forwarded(Composition.plan)
    check_plan = _forwarded(Composition.check_plan)
    read_sources = _forwarded(Composition.read_sources)
    decode = _forwarded(Composition.decode)
    #: :meth:`Composition.load`: the whole logical tensor as numpy.
    load = _forwarded(Composition.load)

    # -- the upstream protocol ------------------------------------------------
    def logical_metadata(self) -> dict[str, Any]:
        """Logical key -> Paddle ``LocalTensorMetadata`` of the whole logical tensor
        (in its natural dtype, or the one :meth:`declaring` set)."""
        from paddle.distributed.flex_checkpoint.dcp.metadata import LocalTensorMetadata

        return {
            k: LocalTensorMetadata(
                global_offset=(0,) * len(e.shape),
                local_shape=e.shape,
                dtype=self._declared.get(k, e.dtype),
                global_shape=e.shape,
            )
            for k, e in self.entries.items()
        }

    def source_keys(self, logical_key: str) -> list[str]:
        """The physical tensors ``logical_key`` is built from."""
        return list(self.entry(logical_key).sources)

    def read_plan(
        self, logical_key: str, target_metadata: Any, force_global: bool = False
    ) -> ReadPlan:
        """Plan the reads for one target shard (remembered for the next :meth:`apply`).

        With ``force_global`` the plan is global for every entry: the loader hands
        apply() whole sources and slices each target's box out of the whole result.
        """
        self.current = logical_key
        target = _target_slice(target_metadata, self.entry(logical_key))
        plan = self._planned(logical_key, target, force_global)
        self._last[logical_key] = plan
        if isinstance(target_metadata, TargetSlice):
            self._for_paddle.discard(logical_key)
        else:
            self._for_paddle.add(logical_key)
        return plan

    def read_plan_for(self, logical_key: str) -> ReadPlan | None:
        """The plan :meth:`read_plan` last made for ``logical_key`` (None if none): what
        Paddle's loader at PR #79712's first revision asks before apply() to learn whether
        the result is the local box or the whole tensor."""
        return self._last.get(logical_key)

    def apply(self, logical_key: str, source_tensors: Mapping[str, Any], output_dtype: Any) -> Any:
        """Build the planned box of ``logical_key`` as a Paddle tensor of ``output_dtype``
        (the whole tensor when no ``read_plan`` was asked for it): Paddle's name for
        :meth:`decode` (the one place flexq says ``apply``).

        Paddle's loader passes the logical dtype of :meth:`logical_metadata` and then
        ``paddle.assign``s the result, which silently turns a target of another dtype
        into the logical one. So when Paddle asked for the plan (read_plan with its
        ``LocalTensorMetadata``) and ``output_dtype`` is the logical dtype, the result
        has the dtype of the target the plan was made for instead (if that is a float
        dtype, or the entry a passthrough), rounded once.
        """
        self.current = logical_key
        entry = self.entry(logical_key)
        planned = self._last.get(logical_key)
        plan = planned or self._planned(
            logical_key, TargetSlice.whole(entry.shape, entry.dtype), True
        )
        out = paddle_dtype_name(output_dtype)
        if (
            planned is not None
            and logical_key in self._for_paddle
            and out == self._declared.get(logical_key, entry.dtype)
            and (entry.is_passthrough or plan.target.dtype in FLOAT_DTYPES)
        ):
            out = plan.target.dtype
        sources = host_to_numpy(source_tensors)
        self._composition.check_plan(logical_key, plan, sources)
        return to_paddle(self._composition.decode(logical_key, sources, plan, out), out)

    # -- flexq's own API ------------------------------------------------------
    def declaring(self, dtypes: Mapping[str, str]) -> ComposedTransform:
        """An adapter over the same composition whose ``logical_metadata()`` declares
        ``dtypes`` (logical key -> Paddle dtype name) for those keys, so Paddle's AOA,
        which refuses a logical dtype that differs from the target's, accepts the dtypes
        of the caller's targets without casts (each value still rounded once). For
        callers holding an adapter; ``engine="native"`` passes its dtypes (and its
        plans) to the constructor instead. The view starts with no plans of its own."""
        return ComposedTransform(self._composition, declared={**self._declared, **dtypes})

    def _planned(self, logical_key: str, target: TargetSlice, force_global: bool) -> ReadPlan:
        """The composition's plan of ``target``, made once per adapter."""
        asked = (logical_key, target, force_global)
        plan = self._made.get(asked)
        if plan is None:
            plan = self._made[asked] = self._composition.plan(logical_key, target, force_global)
        return plan


def _target_slice(meta: Any, entry: LogicalEntry) -> TargetSlice:
    """Paddle's LocalTensorMetadata (or a TargetSlice) as a TargetSlice."""
    if isinstance(meta, TargetSlice):
        return meta
    global_shape = getattr(meta, "global_shape", None) or entry.shape
    return TargetSlice(
        tuple(global_shape),
        tuple(meta.local_shape),
        tuple(meta.global_offset),
        paddle_dtype_name(meta.dtype),
    )
