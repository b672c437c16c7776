"""compressed-tensors integer weights: pack-quantized (W4A16, W8A16) and int-quantized (W8A8).

The flexq hook implementations of the ``ct-int`` format (entry point
``flexq_ct_int.plugin`` in the group ``flexq``). Each ``X.weight_packed`` (or
I8 ``X.weight``) with its scale, zero point, ``weight_shape`` and ``g_idx``
becomes the logical ``X.weight`` ``[out, in]``. Detection lives in
:mod:`flexq_ct_int.detect`, plans in :mod:`flexq_ct_int.plan`, the math in
:mod:`flexq_ct_int.decode`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import flexq
from flexq import Checkpoint, FormatError, LogicalTensor, ReadPlan, TargetSlice
from flexq.formatkit.arrays import to_numpy
from flexq_ct_int.config import FORMAT_NAME, FORMATS, QUANT_METHOD
from flexq_ct_int.decode import dequantize
from flexq_ct_int.detect import analyse, linear_of
from flexq_ct_int.encode import save_ct_int_checkpoint
from flexq_ct_int.plan import local_plan

__all__ = ["FORMAT_NAME"]


@flexq.hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor] | None:
    found = analyse(checkpoint)
    return {k: LogicalTensor(lin.shape, found.dtype) for k, lin in found.linears.items()}


@flexq.hookimpl
def flexq_recognized_keys(checkpoint: Checkpoint) -> Collection[str] | None:
    return analyse(checkpoint).recognized


@flexq.hookimpl
def flexq_source_keys(checkpoint: Checkpoint, logical_key: str) -> list[str]:
    return linear_of(checkpoint, logical_key).sources


@flexq.hookimpl
def flexq_read_plan(
    checkpoint: Checkpoint, logical_key: str, target: TargetSlice, force_global: bool
) -> ReadPlan | None:
    if force_global:
        return None  # the core plans whole sources
    return local_plan(linear_of(checkpoint, logical_key), target)


@flexq.hookimpl
def flexq_apply(
    checkpoint: Checkpoint,
    logical_key: str,
    sources: Mapping[str, Any],
    plan: ReadPlan,
    output_dtype: str,
    out: Any,
) -> Any:
    linear = linear_of(checkpoint, logical_key)
    missing = [k for k in plan.source_slices if k not in sources]
    if missing:
        raise FormatError(
            f"{checkpoint.path}: dequantizing {logical_key!r} needs {missing} "
            f"(format {FORMAT_NAME!r})"
        )
    for key, (_, shape) in plan.source_slices.items():
        if tuple(sources[key].shape) != tuple(shape):
            raise FormatError(
                f"{checkpoint.path}: tensor {key!r} arrived with shape "
                f"{tuple(sources[key].shape)}, the plan for {logical_key!r} needs {shape} "
                f"(format {FORMAT_NAME!r})"
            )
    if linear.shape_key is not None and linear.shape_key in sources:
        _check_shape(checkpoint, linear.shape_key, sources[linear.shape_key], linear.shape)
    try:
        return dequantize(linear, sources, plan, out)
    except FormatError as exc:
        raise FormatError(f"{checkpoint.info(linear.weight_key).file}: {exc}") from None


def _check_shape(ckpt: Checkpoint, key: str, value: Any, shape: tuple[int, int]) -> None:
    """``weight_shape`` must say what the headers said."""
    recorded = tuple(int(v) for v in np.asarray(to_numpy(value)).reshape(-1))
    if recorded != shape:
        raise FormatError(
            f"{ckpt.info(key).file}: tensor {key!r} says {recorded}, but the packed weight "
            f"and its scales hold {shape} (format {FORMAT_NAME!r})"
        )


@flexq.hookimpl
def flexq_quant_methods() -> list[str]:
    return [f"{QUANT_METHOD}/{fmt}" for fmt in FORMATS]


#: Smallest logits cosine similarity promised for a model loaded from the demo's
#: 4-bit, group-32 symmetric weights (15 levels per group, as AWQ's 0.95).
MIN_LOGITS_COSINE = 0.95
DEMO_GROUP_SIZE = 32


@flexq.hookimpl
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, flexq.RawTensor]
) -> float:
    save_ct_int_checkpoint(
        directory, weights, others=others, bits=4, strategy="group", group_size=DEMO_GROUP_SIZE
    )
    return MIN_LOGITS_COSINE
