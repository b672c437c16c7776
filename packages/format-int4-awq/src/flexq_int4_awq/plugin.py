"""AutoAWQ INT4 (GEMM and GEMV layouts): qweight/qzeros/scales -> X.weight [out, in].

The flexq hook implementations of the ``int4-awq`` format (entry point in the
group ``flexq``). A checkpoint is AWQ when ``quantization_config.quant_method``
is ``awq``; each ``X.qweight`` with its ``X.qzeros`` and ``X.scales`` becomes
the logical ``X.weight`` in nn.Linear's [out, in] convention. ``X.bias`` and
unquantized tensors are left to pass through.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flexq import (
    Checkpoint,
    FormatError,
    LogicalTensor,
    RawTensor,
    ReadPlan,
    TargetSlice,
    hookimpl,
    save_checkpoint,
)
from flexq_int4_awq.dequant import dequantize
from flexq_int4_awq.encoder import quantization_config, quantize
from flexq_int4_awq.layout import FORMAT_NAME, SCALE_DTYPES, AwqLinear, analyze
from flexq_int4_awq.planning import local_plan


def _linear(checkpoint: Checkpoint, logical_key: str) -> AwqLinear:
    found = analyze(checkpoint)
    linear = found.linears.get(logical_key) if found else None
    if linear is None:
        raise FormatError(
            f"{checkpoint.path}: {logical_key!r} is not an AWQ weight (format {FORMAT_NAME!r})"
        )
    return linear


@hookimpl
def flexq_quant_methods() -> tuple[str, ...]:
    return ("awq",)


@hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor] | None:
    found = analyze(checkpoint)
    if found is None:
        return None
    return {
        key: LogicalTensor((lin.out_features, lin.in_features), SCALE_DTYPES[lin.scale_dtype])
        for key, lin in found.linears.items()
    }


@hookimpl
def flexq_recognized_keys(checkpoint: Checkpoint) -> Collection[str] | None:
    found = analyze(checkpoint)
    return found.recognized if found else None


@hookimpl
def flexq_source_keys(checkpoint: Checkpoint, logical_key: str) -> list[str]:
    return _linear(checkpoint, logical_key).sources


@hookimpl
def flexq_read_plan(
    checkpoint: Checkpoint, logical_key: str, target: TargetSlice, force_global: bool
) -> ReadPlan | None:
    if force_global:
        return None
    return local_plan(_linear(checkpoint, logical_key), target)


@hookimpl
def flexq_apply(
    checkpoint: Checkpoint,
    logical_key: str,
    sources: Mapping[str, Any],
    plan: ReadPlan,
    output_dtype: str,
    out: Any,
) -> Any:
    linear = _linear(checkpoint, logical_key)
    return dequantize(linear, sources, plan, out)


#: Smallest logits cosine similarity promised for a model loaded from INT4 AWQ
#: weights with groups of 32 (16 levels per group: the coarsest of the formats).
MIN_LOGITS_COSINE = 0.95
DEMO_GROUP_SIZE = 32


@hookimpl
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, RawTensor]
) -> float:
    tensors = dict(others)
    for key, w in weights.items():
        tensors.update(quantize(w, DEMO_GROUP_SIZE, prefix=key.removesuffix(".weight")))
    config = {"quantization_config": quantization_config(DEMO_GROUP_SIZE)}
    save_checkpoint(directory, tensors, config=config)
    return MIN_LOGITS_COSINE
