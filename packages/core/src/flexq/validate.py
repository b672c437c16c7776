"""Checks on what format plugins return, so a misbehaving plugin fails with a clear error.

Used by the composer before any data is read (plans) and before any target is
written (apply results), and by format plugins on the scales they decode
(:func:`check_scales`), so every format treats a corrupt scale the same way.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.errors import PluginError, ScaleWarning
from flexq.ops import is_paddle
from flexq.plan import ReadPlan, TargetSlice, box_inside
from flexq.plugins import registry

if TYPE_CHECKING:
    from flexq.checkpoint import Checkpoint
    from flexq.header import TensorInfo


def check_plan(
    ckpt: Checkpoint,
    owner: str,
    logical_key: str,
    plan: object,
    target: TargetSlice,
    sources: tuple[str, ...],
) -> ReadPlan:
    """``plan``, checked: raise :class:`PluginError` unless it is a well-formed plan for
    ``target`` reading boxes inside its own sources."""
    where = f"{registry.describe(owner)}: read plan for {logical_key!r}"
    if not isinstance(plan, ReadPlan):
        raise PluginError(f"{where} is a {type(plan).__name__}, not a flexq.ReadPlan")
    if plan.mode == "local" and plan.target != target:
        raise PluginError(f"{where} produces {plan.target}, not the asked {target}")
    for key, (offset, shape) in plan.source_slices.items():
        if key not in sources:
            raise PluginError(f"{where} reads {key!r}, which is not one of its sources {sources}")
        full = ckpt.info(key).shape
        if not box_inside(offset, shape, full):
            raise PluginError(
                f"{where} reads box {offset}+{shape} of {key!r}, outside its shape {full}"
            )
    return plan


#: Set to "error" to make a NaN or infinite scale a FormatError instead of a ScaleWarning.
NONFINITE_SCALES_ENV = "FLEXQ_NONFINITE_SCALES"
#: Paddle dtype names a format's apply may return (float32, or the output dtype).
_FLOAT_RESULTS = frozenset({"float16", "bfloat16", "float32", "float64"})


def check_result(
    owner: str | None,
    logical_key: str,
    result: Any,
    shape: tuple[int, ...],
    output_dtype: str | None = None,
) -> None:
    """Raise :class:`PluginError` unless ``result`` is an array of ``shape``.

    A format's result must also be floating point (float32, or ``output_dtype``
    itself, which for numpy bfloat16 is uint16 bits): integer codes returned
    undecoded would otherwise be cast silently.
    """
    who = registry.describe(owner) if owner else "passthrough"
    if result is None or not hasattr(result, "shape") or not hasattr(result, "dtype"):
        raise PluginError(f"{who}: apply for {logical_key!r} returned {type(result).__name__}")
    if tuple(result.shape) != tuple(shape):
        raise PluginError(
            f"{who}: apply for {logical_key!r} returned shape {tuple(result.shape)}, "
            f"expected {tuple(shape)}"
        )
    if owner is None:
        return  # passthrough tensors keep their own dtype
    name = str(result.dtype).removeprefix("paddle.").lower()
    allowed = _FLOAT_RESULTS | ({output_dtype} if output_dtype else set())
    if name not in allowed and not (name == "uint16" and output_dtype in (None, "bfloat16")):
        raise PluginError(
            f"{who}: apply for {logical_key!r} returned dtype {name}; a format returns "
            f"float32 or the output dtype{f' ({output_dtype})' if output_dtype else ''}"
        )


def check_scales(
    values: Any,
    *,
    scale: TensorInfo,
    logical_key: str,
    format_name: str,
    offset: Sequence[int] = (),
) -> None:
    """Warn with :class:`ScaleWarning` when a decoded scale is NaN or infinite.

    For format plugins, before they multiply. The result is still decoded per
    the element format's definition (a NaN scale makes its block NaN, an
    infinite one makes it +-inf or NaN): flexq never invents values. Every
    producer derives scales from a finite absolute maximum, so a non-finite
    scale means a corrupt file; the warning names it, and
    ``warnings.simplefilter("error", ScaleWarning)`` or the environment variable
    ``FLEXQ_NONFINITE_SCALES=error`` (for the CLI) turns it into a :class:`FormatError`.
    Zero and negative scales are finite values of the stored dtype: decoded as
    the format's product defines, without a warning.

    :param values: the decoded float scales, in the stored box's shape (numpy or Paddle).
    :param scale: header entry of the scale tensor (for the file and key in the message).
    :param offset: where the box starts in the stored tensor (for the index reported).
    """
    if is_paddle(values):
        import paddle

        if bool(paddle.all(paddle.isfinite(values))):
            return
        values = values.numpy()
    arr = np.asarray(values, dtype=np.float32)
    bad = ~np.isfinite(arr)
    if not bad.any():
        return
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    start = tuple(offset) or (0,) * arr.ndim
    index = [i + o for i, o in zip(first, start, strict=False)]
    problem = ScaleWarning(
        f"{scale.file}: tensor {scale.key!r}: scale {float(arr[first])} at {index} "
        f"({int(bad.sum())} of {arr.size} read) makes {logical_key!r} non-finite; "
        f"the file is corrupt (format {format_name!r})"
    )
    if os.environ.get(NONFINITE_SCALES_ENV, "warn") == "error":
        raise problem
    warnings.warn(problem, stacklevel=2)
