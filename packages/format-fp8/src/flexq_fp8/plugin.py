"""FP8 E4M3 weights: per-tensor, per-channel, block-wise and compressed-tensors scales.

The flexq hook implementations of the ``fp8`` format (entry point
``flexq_fp8.plugin`` in the group ``flexq``). Detection lives in
:mod:`flexq_fp8.detect`, plans in :mod:`flexq_fp8.plan`, the dequantize math in
:mod:`flexq_fp8.dequant`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import flexq
from flexq import Checkpoint, FormatError, LogicalTensor, ReadPlan, TargetSlice
from flexq_fp8.dequant import dequantize
from flexq_fp8.detect import analyse, layout_of
from flexq_fp8.plan import local_plan
from flexq_fp8.save import save_fp8_checkpoint

FORMAT_NAME = "fp8"


@flexq.hookimpl
def flexq_quant_methods() -> tuple[str, ...]:
    return ("fp8", "fbgemm_fp8", "compressed-tensors/float-quantized", "modelopt")


@flexq.hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor] | None:
    found = analyse(checkpoint)
    return {k: LogicalTensor(lay.shape, found.dtype) for k, lay in found.layouts.items()}


@flexq.hookimpl
def flexq_recognized_keys(checkpoint: Checkpoint) -> Collection[str] | None:
    return analyse(checkpoint).recognized


@flexq.hookimpl
def flexq_source_keys(checkpoint: Checkpoint, logical_key: str) -> list[str]:
    layout = layout_of(checkpoint, logical_key)
    return [layout.weight_key, layout.scale_key]


@flexq.hookimpl
def flexq_read_plan(
    checkpoint: Checkpoint, logical_key: str, target: TargetSlice, force_global: bool
) -> ReadPlan | None:
    if force_global:
        return None  # the core plans whole sources
    return local_plan(layout_of(checkpoint, logical_key), target)


@flexq.hookimpl
def flexq_apply(
    checkpoint: Checkpoint,
    logical_key: str,
    sources: Mapping[str, Any],
    plan: ReadPlan,
    output_dtype: str,
    out: Any,
) -> Any:
    layout = layout_of(checkpoint, logical_key)
    missing = [k for k in (layout.weight_key, layout.scale_key) if k not in sources]
    if missing:
        raise FormatError(
            f"{checkpoint.path}: dequantizing {logical_key!r} needs {missing} (format fp8)"
        )
    weight, scale = sources[layout.weight_key], sources[layout.scale_key]
    target = plan.target
    if tuple(weight.shape) != target.local_shape:
        raise FormatError(
            f"{checkpoint.path}: tensor {layout.weight_key!r} arrived with shape "
            f"{tuple(weight.shape)}, the plan for {logical_key!r} needs {target.local_shape} "
            f"(format fp8)"
        )
    grid_box = layout.grid_cover(target.global_offset, target.local_shape)
    scale_shape = layout.scale_box(*grid_box)[1]
    if tuple(scale.shape) != scale_shape:
        raise FormatError(
            f"{checkpoint.path}: tensor {layout.scale_key!r} arrived with shape "
            f"{tuple(scale.shape)}, the plan for {logical_key!r} needs {scale_shape} "
            f"(format fp8)"
        )
    return dequantize(layout, weight, scale, target.global_offset, target.local_shape, out)


#: Smallest logits cosine similarity promised for a model loaded from block-FP8
#: weights (E4M3 keeps 3 mantissa bits: relative error <= 2^-4 per weight).
MIN_LOGITS_COSINE = 0.99


@flexq.hookimpl
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, flexq.RawTensor]
) -> float:
    save_fp8_checkpoint(directory, weights, layout="block", others=others)
    return MIN_LOGITS_COSINE
