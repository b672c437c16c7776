"""The kit's conformance check: a format's read plans declare every scale-like component.

For format authors' tests (and flexq's own, over every format): the core checks
what a plan declares in ``ReadPlan.scales`` (finite) and ``ReadPlan.checks``
(the format's own ``ReadPlan.check``) for every piece before the first write of
a load. A component a plan reads but declares in neither is only looked at while
decoding, after other targets were written: a NaN global scale or a g_idx out of
range would then leave a failed load half done. :func:`check_conformance` plans
a few boxes of every logical tensor a format owns and fails when one reads such
a component undeclared.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from flexq.errors import PluginError
from flexq.io.dtypes import dtype
from flexq.plan import TargetSlice

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.io.header import TensorInfo
    from flexq.plan import ReadPlan
    from flexq.transform import ComposedTransform

#: Last name components of scales whose names do not say "scale" (bitsandbytes').
SCALE_NAMES = frozenset({"SCB", "absmax", "nested_absmax"})
#: Metadata a decoder validates: group indexes, recorded shapes, layout tags, code books.
METADATA_NAMES = frozenset(
    {"g_idx", "weight_g_idx", "weight_shape", "weight_format", "quant_map", "nested_quant_map"}
)
#: Zero points: scale-like when stored as floats (every integer is a valid zero point).
ZERO_POINT_NAMES = frozenset({"qzeros", "zeros", "weight_zero_point"})


def scale_like(key: str, info: TensorInfo) -> str | None:
    """Why source ``key`` must be checked before the first write (a scale, a float zero
    point, metadata its decoder validates), or None for element codes and the like."""
    last = key.rsplit(".", 1)[-1]
    # "scale" anywhere in the last component: scales, weight_scale(_inv, _2),
    # weight_global_scale, gpt-oss *_scales, the example's weight_qscale.
    if last in SCALE_NAMES or "scale" in last.lower():
        return "a scale"
    if last in METADATA_NAMES:
        return "metadata its decoder validates"
    if last in ZERO_POINT_NAMES and dtype(info.dtype).kind == "float":
        return "a float zero point"
    return None


def undeclared(ct: Composition | ComposedTransform, plan: ReadPlan) -> list[tuple[str, str]]:
    """The scale-like sources ``plan`` reads but declares in neither ``scales`` nor
    ``checks``, with why each counts."""
    declared = set(plan.checked)
    return [
        (key, why)
        for key in plan.source_slices
        if key not in declared and (why := scale_like(key, ct.checkpoint.info(key))) is not None
    ]


def _boxes(shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The whole tensor, and its second half along the first axis (a sharded piece)."""
    whole = ((0,) * len(shape), shape)
    if not shape or shape[0] < 2:
        return [whole]
    half = shape[0] // 2
    return [whole, ((half, *(0,) * (len(shape) - 1)), (shape[0] - half, *shape[1:]))]


def check_conformance(
    ct: Composition | ComposedTransform, formats: Collection[str] | None = None
) -> None:
    """Fail when a read plan of a format (every format of ``ct``, or those in ``formats``)
    reads a scale-like component it does not declare.

    :raises PluginError: naming the format, the logical tensor, the component and why it
        counts (``format 'f': read plan for 'x.weight' reads 'x.weight_global_scale' (a
        scale) but declares it in neither ReadPlan.scales nor ReadPlan.checks ...``).
    """
    for key, entry in ct.entries.items():
        if entry.is_passthrough or (formats is not None and entry.owner not in formats):
            continue
        for offset, shape in _boxes(entry.shape):
            plan = ct.plan(key, TargetSlice(entry.shape, shape, offset, "float32"))
            if plan.checks and plan.check is None:
                raise PluginError(
                    f"format {entry.owner!r}: read plan for {key!r} declares checks "
                    f"{list(plan.checks)} but no ReadPlan.check to run on them"
                )
            for source, why in undeclared(ct, plan):
                raise PluginError(
                    f"format {entry.owner!r}: read plan for {key!r} (box {offset}+{shape}) "
                    f"reads {source!r} ({why}) but declares it in neither ReadPlan.scales "
                    f"nor ReadPlan.checks (with ReadPlan.check), so a bad value there is "
                    f"found only after other targets were written"
                )
