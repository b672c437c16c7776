"""NVFP4: compressed-tensors ``nvfp4-pack-quantized``, NVIDIA ModelOpt ``NVFP4`` and auto-round.

The flexq hook implementations of the ``nvfp4`` format (entry point
``flexq_nvfp4.plugin``). Detection lives in :mod:`flexq_nvfp4.detect`, plans in
:mod:`flexq_nvfp4.plan`, the math in :mod:`flexq_nvfp4.decode`, the encoder in
:mod:`flexq_nvfp4.encode`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

import flexq
from flexq import Checkpoint, FormatError, LogicalTensor, ReadPlan, TargetSlice
from flexq.formatkit import check_scales
from flexq_nvfp4.config import CT_FORMAT, FORMAT
from flexq_nvfp4.decode import dequantize, effective_scales, element_pairs, scales_to_check
from flexq_nvfp4.detect import analyze, tensor_of
from flexq_nvfp4.encode import CT_NVFP4_CONFIG, quantize
from flexq_nvfp4.plan import covering_blocks, local_plan, trim_of

if TYPE_CHECKING:
    from pathlib import Path

FORMAT_NAME = FORMAT


@flexq.hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor]:
    found = analyze(checkpoint)
    return {k: LogicalTensor(t.shape, found.dtype) for k, t in found.tensors.items()}


@flexq.hookimpl
def flexq_recognized_keys(checkpoint: Checkpoint) -> frozenset[str]:
    return analyze(checkpoint).recognized


@flexq.hookimpl
def flexq_source_keys(checkpoint: Checkpoint, logical_key: str) -> list[str]:
    return tensor_of(checkpoint, logical_key).sources


@flexq.hookimpl
def flexq_read_plan(
    checkpoint: Checkpoint, logical_key: str, target: TargetSlice, force_global: bool
) -> ReadPlan | None:
    if force_global:
        return None  # the core builds the whole-source plan
    return local_plan(tensor_of(checkpoint, logical_key), target)


@flexq.hookimpl
def flexq_apply(
    checkpoint: Checkpoint,
    logical_key: str,
    sources: Mapping[str, Any],
    plan: ReadPlan,
    output_dtype: str,
    out: Any,
) -> Any:
    t = tensor_of(checkpoint, logical_key)
    missing = [k for k in t.sources if k not in sources]
    if missing:
        raise FormatError(
            f"{checkpoint.path}: dequantizing {logical_key!r} needs {missing} (format {FORMAT!r})"
        )
    packed, scales, glob = (sources[k] for k in t.sources)
    target = plan.target
    first, count = covering_blocks(t, target)
    want = {
        t.packed_key: t.packed_box(
            target.global_offset[:-1], target.local_shape[:-1], first, count
        )[1],
        t.scale_key: (*target.local_shape[:-1], count),
        t.global_key: t.global_shape,
    }
    for key, shape in want.items():
        if tuple(sources[key].shape) != shape:
            raise FormatError(
                f"{checkpoint.path}: format {FORMAT!r}: {logical_key!r} got {key!r} of shape "
                f"{tuple(sources[key].shape)}, its plan needs {shape}"
            )
    pairs = element_pairs(t.producer, glob)
    scale = effective_scales(t.producer, scales, glob)
    check_scales(
        scales_to_check(scale, pairs),
        scale=checkpoint.info(t.scale_key),
        logical_key=logical_key,
        format_name=FORMAT,
        offset=plan.source_slices.get(t.scale_key, ((), ()))[0],
    )
    return dequantize(pairs, packed, scale, trim_of(target), target.local_shape[-1], out)


@flexq.hookimpl
def flexq_quant_methods() -> list[str]:
    """The ``quant_method`` values this format decodes (compressed-tensors with its format).

    auto-round also names GPTQ-style integer checkpoints; this format claims only its
    NVFP4 tensors (the core matches a method when any format claiming it finds tensors).
    """
    return [f"compressed-tensors/{CT_FORMAT}", "modelopt", "auto-round"]


#: Smallest logits cosine similarity promised for a model loaded from NVFP4 weights
#: (E2M1 keeps one mantissa bit per element; E4M3 block scales per 16).
MIN_LOGITS_COSINE = 0.90


@flexq.hookimpl
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, flexq.RawTensor]
) -> float:
    tensors = {**others, **quantize(weights, layout="compressed-tensors")}
    flexq.save_checkpoint(directory, tensors, config={"quantization_config": CT_NVFP4_CONFIG})
    return MIN_LOGITS_COSINE
