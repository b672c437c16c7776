"""OCP MXFP4: gpt-oss `*_blocks`/`*_scales` and compressed-tensors `mxfp4-pack-quantized`.

The flexq hook implementations of the ``mxfp4`` format (entry point
``flexq_mxfp4.plugin``), each a call into the module that does the work:
:mod:`flexq_mxfp4.detect` (which tensors, from headers and config),
:mod:`flexq_mxfp4.plan` (local read plans), :mod:`flexq_mxfp4.decode` (the
math) and :mod:`flexq_mxfp4.encode` (checkpoints for the demo).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import flexq
from flexq import Checkpoint, LogicalTensor, ReadPlan, TargetSlice
from flexq_mxfp4 import decode
from flexq_mxfp4.config import CT_FORMAT
from flexq_mxfp4.detect import analyze, layout_of
from flexq_mxfp4.encode import save_mxfp4_checkpoint
from flexq_mxfp4.plan import local_plan

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

#: Smallest logits cosine similarity promised for a model loaded from MXFP4
#: weights (E2M1 keeps one mantissa bit per element, one power-of-two per 32).
MIN_LOGITS_COSINE = 0.90


@flexq.hookimpl
def flexq_quant_methods() -> tuple[str, ...]:
    return ("mxfp4", f"compressed-tensors/{CT_FORMAT}")


@flexq.hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor]:
    found = analyze(checkpoint)
    return {k: LogicalTensor(t.shape, found.dtype) for k, t in found.layouts.items()}


@flexq.hookimpl
def flexq_recognized_keys(checkpoint: Checkpoint) -> frozenset[str]:
    return analyze(checkpoint).recognized


@flexq.hookimpl
def flexq_source_keys(checkpoint: Checkpoint, logical_key: str) -> list[str]:
    t = layout_of(checkpoint, logical_key)
    return [t.packed_key, t.scale_key]


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
    # The weights are nn.Linear [out, in]: llm-compressor's layout stores them as they are.
    save_mxfp4_checkpoint(directory, weights, layout="compressed-tensors", others=others)
    return MIN_LOGITS_COSINE
