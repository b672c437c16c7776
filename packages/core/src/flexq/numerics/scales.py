"""Scales: decoding stored scales to float32 and the one check every format runs on them.

For format plugins, before they multiply: :func:`scale_to_float32` reads a
scale of any dtype producers store (F32, F16, BF16, E8M0 bytes, E4M3 bytes),
and :func:`check_scales` warns about NaN or infinite scales the same way in
every format.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.errors import FlexqError, ScaleWarning
from flexq.io.dtypes import DTYPES
from flexq.numerics.arrays import is_paddle
from flexq.numerics.elements import E4M3_TO_FLOAT32, E8M0_TO_FLOAT32

if TYPE_CHECKING:
    from flexq.io.header import TensorInfo
    from flexq.numerics.ops import ArrayOps

#: The float storage dtypes scales are stored in -> the Paddle dtype of their values
#: (what a format's logical tensor takes when its scales say the model dtype), read
#: off the one dtype table.
FLOAT_SCALE_DTYPES: dict[str, str] = {
    d.name: d.paddle for d in DTYPES.values() if d.kind == "float" and d.bits <= 32 and d.paddle
}

#: Set to "error" to make a NaN or infinite scale a FormatError instead of a ScaleWarning.
NONFINITE_SCALES_ENV = "FLEXQ_NONFINITE_SCALES"
#: The values NONFINITE_SCALES_ENV may take.
NONFINITE_SCALES_VALUES = ("warn", "error")


def nonfinite_scales_policy() -> str:
    """``"warn"`` or ``"error"``, from NONFINITE_SCALES_ENV (default ``"warn"``).

    :raises FlexqError: for any other value: a misspelled ``error`` silently meaning
        ``warn`` would hide the corrupt scales the user asked to fail on.
    """
    value = os.environ.get(NONFINITE_SCALES_ENV, "warn").strip().lower() or "warn"
    if value not in NONFINITE_SCALES_VALUES:
        allowed = " or ".join(repr(v) for v in NONFINITE_SCALES_VALUES)
        raise FlexqError(
            f"{NONFINITE_SCALES_ENV}={os.environ[NONFINITE_SCALES_ENV]!r} is not {allowed}; "
            "set one of those or unset it"
        )
    return value


def scale_to_float32(ops: ArrayOps, scale: Any, dtype: str) -> Any:
    """A stored scale of safetensors ``dtype`` as float32 values.

    ``U8`` and ``F8_E8M0`` scales are E8M0 exponents (MXFP4, ue8m0 block FP8),
    ``F8_E4M3`` scales are E4M3 values (NVFP4); float dtypes are widened.
    """
    if dtype in ("U8", "F8_E8M0"):
        return ops.lut(E8M0_TO_FLOAT32, scale)
    if dtype == "F8_E4M3":
        return ops.lut(E4M3_TO_FLOAT32, scale)
    return ops.float32(scale, dtype)


def check_scales(
    values: Any,
    *,
    scale: TensorInfo,
    logical_key: str,
    format_name: str,
    offset: Sequence[int] = (),
    bad: Any = None,
    why: str | None = None,
) -> None:
    """Warn with :class:`flexq.ScaleWarning` when a decoded scale is NaN or infinite.

    The result is still decoded per the element format's definition (a NaN
    scale makes its block NaN, an infinite one makes it +-inf or NaN): flexq
    never invents values. Every producer derives scales from a finite absolute
    maximum, so a non-finite scale means a corrupt file; the warning names it,
    and ``warnings.simplefilter("error", ScaleWarning)`` or the environment
    variable ``FLEXQ_NONFINITE_SCALES=error`` turns it into a
    :class:`flexq.FormatError`. Zero and negative scales are finite values of
    the stored dtype: decoded as the format's product defines, without a warning.

    :param values: the decoded float scales, in the stored box's shape (numpy or Paddle).
    :param scale: header entry of the scale tensor (for the file and key in the message).
    :param offset: where the box starts in the stored tensor (for the index reported).
    :param bad: for scales that are wrong other than by being non-finite (a zero that
        the format's definition divides by): a boolean mask of ``values``' shape
        marking them; None: the non-finite ones.
    :param why: what the bad scale does, for the message (default: ``makes
        '<logical_key>' non-finite``).
    """
    policy = nonfinite_scales_policy()
    if bad is None and is_paddle(values):
        import paddle

        if bool(paddle.all(paddle.isfinite(values))):
            return
        values = values.numpy()
    arr = np.asarray(values.numpy() if is_paddle(values) else values, dtype=np.float32)
    bad = ~np.isfinite(arr) if bad is None else np.asarray(bad, dtype=bool)
    if not bad.any():
        return
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    start = tuple(offset) or (0,) * arr.ndim
    index = [i + o for i, o in zip(first, start, strict=False)]
    problem = ScaleWarning(
        f"{scale.file}: tensor {scale.key!r}: scale {float(arr[first])} at {index} "
        f"({int(bad.sum())} of {arr.size} read) {why or f'makes {logical_key!r} non-finite'}; "
        f"the file is corrupt (format {format_name!r})"
    )
    if policy == "error":
        raise problem
    warnings.warn(problem, stacklevel=2)
