"""GPTQ (AutoGPTQ, GPTQModel, optimum, auto-round): qweight, qzeros, scales, g_idx -> X.weight.

The flexq hook implementations of the ``gptq`` format (entry point in the
group ``flexq``). Detection lives in :mod:`flexq_gptq.detect`, plans in
:mod:`flexq_gptq.plan`, the math in :mod:`flexq_gptq.decode`. ``X.bias`` and
unquantized tensors are left to pass through.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from flexq_gptq.config import AUTO_ROUND_METHODS, FORMAT_NAME, GPTQ_METHODS
from flexq_gptq.decode import dequantize
from flexq_gptq.detect import analyze
from flexq_gptq.encode import quantization_config, quantize
from flexq_gptq.plan import local_plan

if TYPE_CHECKING:
    from flexq_gptq.layout import GptqLinear


def _linear(checkpoint: Checkpoint, logical_key: str) -> GptqLinear:
    found = analyze(checkpoint)
    linear = found.linears.get(logical_key) if found else None
    if linear is None:
        raise FormatError(
            f"{checkpoint.path}: {logical_key!r} is not a GPTQ weight (format {FORMAT_NAME!r})"
        )
    return linear


@hookimpl
def flexq_quant_methods() -> list[str]:
    return [*GPTQ_METHODS, *AUTO_ROUND_METHODS]


@hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor] | None:
    found = analyze(checkpoint)
    if found is None:
        return None
    return {
        key: LogicalTensor((lin.out_features, lin.in_features), lin.dtype)
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
    # The plan declares the scales: the core checks them before the first write.
    return dequantize(checkpoint, _linear(checkpoint, logical_key), sources, plan, out)


#: Smallest logits cosine similarity promised for a model loaded from 4-bit GPTQ
#: weights with groups of 32 (16 levels per group, round to nearest).
MIN_LOGITS_COSINE = 0.95
DEMO_BITS = 4
DEMO_GROUP_SIZE = 32


@hookimpl
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, RawTensor]
) -> float:
    # Act-order groups (a fixed column permutation per weight) so that every
    # cross-package load exercises scattered groups.
    tensors = dict(others)
    for n, (key, w) in enumerate(weights.items()):
        perm = np.random.default_rng(n).permutation(w.shape[1])
        prefix = key.removesuffix(".weight")
        tensors.update(quantize(w, DEMO_BITS, DEMO_GROUP_SIZE, perm=perm, prefix=prefix))
    config = {"quantization_config": quantization_config(DEMO_BITS, DEMO_GROUP_SIZE, desc_act=True)}
    save_checkpoint(directory, tensors, config=config)
    return MIN_LOGITS_COSINE
