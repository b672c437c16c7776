"""FP8 E4M3 weights: per-tensor, per-channel, block-wise and compressed-tensors scales.

The flexq hook implementations of the ``fp8`` format (entry point
``flexq_fp8.plugin`` in the group ``flexq``), each a call into the module
that does the work: :mod:`flexq_fp8.detect` (which tensors, from headers and
config), :mod:`flexq_fp8.plan` (local read plans), :mod:`flexq_fp8.decode`
(the math) and :mod:`flexq_fp8.encode` (checkpoints for the demo).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

import flexq
from flexq import Checkpoint, LogicalTensor, ReadPlan, TargetSlice
from flexq_fp8 import decode
from flexq_fp8.config import FORMAT_NAME
from flexq_fp8.detect import analyze, layout_of
from flexq_fp8.encode import save_fp8_checkpoint
from flexq_fp8.plan import local_plan

__all__ = ["FORMAT_NAME", "MIN_LOGITS_COSINE"]

#: Smallest logits cosine similarity promised for a model loaded from block-FP8
#: weights (E4M3 keeps 3 mantissa bits: relative error <= 2^-4 per weight).
MIN_LOGITS_COSINE = 0.99


@flexq.hookimpl
def flexq_quant_methods() -> tuple[str, ...]:
    # auto-round's own FP8 export (data_type fp) stores the same weights and scales.
    return ("fp8", "fbgemm_fp8", "compressed-tensors/float-quantized", "modelopt", "auto-round")


@flexq.hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor]:
    found = analyze(checkpoint)
    return {k: LogicalTensor(lay.shape, found.dtype) for k, lay in found.layouts.items()}


@flexq.hookimpl
def flexq_recognized_keys(checkpoint: Checkpoint) -> frozenset[str]:
    return analyze(checkpoint).recognized


@flexq.hookimpl
def flexq_source_keys(checkpoint: Checkpoint, logical_key: str) -> list[str]:
    layout = layout_of(checkpoint, logical_key)
    return [layout.weight_key, layout.scale_key]


@flexq.hookimpl
def flexq_read_plan(
    checkpoint: Checkpoint, logical_key: str, target: TargetSlice, force_global: bool
) -> ReadPlan | None:
    # None on force_global: the core plans whole sources.
    return None if force_global else local_plan(layout_of(checkpoint, logical_key), target)


@flexq.hookimpl
def flexq_apply(
    checkpoint: Checkpoint, logical_key: str, sources: Mapping[str, Any], plan: ReadPlan, out: Any
) -> Any:
    return decode.apply(checkpoint, layout_of(checkpoint, logical_key), sources, plan, out)


@flexq.hookimpl
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, flexq.RawTensor]
) -> float:
    save_fp8_checkpoint(directory, weights, layout="block", others=others)
    return MIN_LOGITS_COSINE
