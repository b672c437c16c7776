"""Linears stored as ``X.qweight`` beside ``X.qzeros`` and ``X.scales`` (GPTQ, AWQ).

For formats of the AutoGPTQ / AutoAWQ lineage, whose every quantized module
``X`` stores its packed codes as ``X.qweight`` and whose logical tensor is
``X.weight``: :class:`QLinearKeys` names a module's keys,
:func:`qweight_analysis` finds every such linear of a checkpoint the format's
config claims (refusing a config that claims a method but stores no qweight,
which would otherwise load the model silently unquantized), and
:func:`require_companions` / :func:`check_stored` are the checks of one linear's
components every format of the lineage makes, with the format's own errors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar, overload

from flexq.errors import FormatError
from flexq.formatkit.format import Analysis, FoundTensor

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flexq.io.checkpoint import Checkpoint
    from flexq.io.header import TensorInfo

L = TypeVar("L", bound=FoundTensor)
#: A format's error for one tensor: ``fail(tensor key, what is wrong)``.
Fail = Callable[[str, str], FormatError]


class _ModuleKey:
    """A read-only attribute of a :class:`QLinearKeys`: the key ``{prefix}.{name}``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.__doc__ = f"``X.{name}``"

    @overload
    def __get__(self, obj: None, owner: type) -> _ModuleKey: ...

    @overload
    def __get__(self, obj: QLinearKeys, owner: type) -> str: ...

    def __get__(self, obj: QLinearKeys | None, owner: type) -> _ModuleKey | str:
        return self if obj is None else f"{obj.prefix}.{self.name}"


class QLinearKeys:
    """The keys of one ``X.qweight`` linear, from its module name ``prefix``, and the
    logical weight's shape.

    Mix it into a format's layout dataclass that has ``prefix``, ``out_features`` and
    ``in_features`` fields.
    """

    prefix: str
    out_features: int
    in_features: int
    #: ``X.weight``, the logical tensor.
    logical_key = _ModuleKey("weight")
    qweight = _ModuleKey("qweight")
    qzeros = _ModuleKey("qzeros")
    scales = _ModuleKey("scales")

    @property
    def shape(self) -> tuple[int, int]:
        """The logical weight's shape, nn.Linear's ``(out, in)``."""
        return self.out_features, self.in_features


def qweight_analysis(
    ckpt: Checkpoint,
    components: Sequence[str],
    build: Callable[[str], L],
    *,
    where: str,
    method: str,
    format_name: str,
) -> Analysis[L]:
    """Every ``X.qweight`` linear of a checkpoint whose config claims the format.

    :param components: the component names (``"qweight"``, ``"qzeros"``, ...): every
        key ending in one is recognized, so one without its linear is an orphan.
    :param build: checks module ``X`` and returns its layout (logical key ``X.weight``);
        called in sorted key order.
    :param where: the config's place, for the error (``.../config.json: quantization_config``).
    :raises FormatError: when no tensor is a ``<module>.qweight``.
    """
    tensors = ckpt.tensors
    suffixes = tuple(f".{c}" for c in components)
    recognized = frozenset(k for k in tensors if k.endswith(suffixes))
    prefixes = [k.removesuffix(".qweight") for k in sorted(tensors) if k.endswith(".qweight")]
    found = {f"{prefix}.weight": build(prefix) for prefix in prefixes}
    if not found:
        dtypes = ", ".join(sorted({t.dtype for t in tensors.values()}))
        raise FormatError(
            f"{where}: quant_method {method!r}, but no tensor is a '<module>.qweight' "
            f"(tensor dtypes: {dtypes}) (format {format_name!r})"
        )
    return Analysis(found, recognized)


def require_companions(
    tensors: Mapping[str, TensorInfo], prefix: str, components: Iterable[str], fail: Fail
) -> None:
    """Every ``{prefix}.{component}`` is stored beside ``{prefix}.qweight``.

    :raises FormatError: ``fail(qweight, "has no companion X.c (missing component)")`` for
        the first one missing.
    """
    for comp in components:
        if f"{prefix}.{comp}" not in tensors:
            raise fail(f"{prefix}.qweight", f"has no companion {prefix}.{comp} (missing component)")


def check_stored(checks: Iterable[tuple[TensorInfo, Sequence[str], int]], fail: Fail) -> None:
    """Each component's stored dtype is one of those allowed and its rank the one expected,
    checked in order (dtype first) before any shape arithmetic relies on them.

    :param checks: (the component's header, its allowed dtypes, its rank).
    :raises FormatError: ``fail(key, "has dtype D, expected A or B")`` or ``fail(key,
        "has shape S, expected a N-D tensor")`` for the first one that is not.
    """
    for info, allowed, rank in checks:
        if info.dtype not in allowed:
            raise fail(info.key, f"has dtype {info.dtype}, expected {' or '.join(allowed)}")
        if len(info.shape) != rank:
            raise fail(info.key, f"has shape {info.shape}, expected a {rank}-D tensor")
