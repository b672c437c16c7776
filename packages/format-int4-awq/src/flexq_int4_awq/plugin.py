"""AutoAWQ INT4 (GEMM and GEMV layouts): qweight/qzeros/scales -> X.weight [out, in].

The flexq hook implementations of the ``int4-awq`` format (entry point in the
group ``flexq``), each a call into the module that does the work:
:mod:`flexq_int4_awq.detect` (which linears, from config and headers),
:mod:`flexq_int4_awq.plan` (local read plans), :mod:`flexq_int4_awq.decode`
(the math) and :mod:`flexq_int4_awq.encode` (checkpoints for the demo).
``X.bias`` and unquantized tensors are left to pass through.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flexq import Checkpoint, LogicalTensor, RawTensor, ReadPlan, TargetSlice, hookimpl
from flexq_int4_awq.decode import dequantize
from flexq_int4_awq.detect import analyze, layout_of
from flexq_int4_awq.encode import save_awq_checkpoint
from flexq_int4_awq.layout import SCALE_DTYPES
from flexq_int4_awq.plan import local_plan

#: Smallest logits cosine similarity promised for a model loaded from INT4 AWQ
#: weights with groups of 32 (16 levels per group: the coarsest of the formats).
MIN_LOGITS_COSINE = 0.95
DEMO_GROUP_SIZE = 32


@hookimpl
def flexq_quant_methods() -> tuple[str, ...]:
    return ("awq",)


@hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor] | None:
    # The natural dtype is the scales' (AutoAWQ keeps them in the model's dtype).
    found = analyze(checkpoint)
    layouts = found.layouts if found else {}
    return {
        k: LogicalTensor(lin.shape, SCALE_DTYPES[lin.scale_dtype]) for k, lin in layouts.items()
    }


@hookimpl
def flexq_recognized_keys(checkpoint: Checkpoint) -> frozenset[str] | None:
    found = analyze(checkpoint)
    return found.recognized if found else None


@hookimpl
def flexq_source_keys(checkpoint: Checkpoint, logical_key: str) -> list[str]:
    return layout_of(checkpoint, logical_key).sources


@hookimpl
def flexq_read_plan(
    checkpoint: Checkpoint, logical_key: str, target: TargetSlice, force_global: bool
) -> ReadPlan | None:
    # None on force_global: the core plans whole sources.
    return None if force_global else local_plan(layout_of(checkpoint, logical_key), target)


@hookimpl
def flexq_apply(
    checkpoint: Checkpoint, logical_key: str, sources: Mapping[str, Any], plan: ReadPlan, out: Any
) -> Any:
    return dequantize(layout_of(checkpoint, logical_key), sources, plan, out)


@hookimpl
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, RawTensor]
) -> float:
    save_awq_checkpoint(directory, weights, DEMO_GROUP_SIZE, others=others)
    return MIN_LOGITS_COSINE
