"""OCP MXFP4: gpt-oss `*_blocks`/`*_scales` and compressed-tensors `mxfp4-pack-quantized`.

The flexq hook implementations of the ``mxfp4`` format (entry point
``flexq_mxfp4.plugin``). Detection lives in :mod:`flexq_mxfp4.detect`, plans in
:mod:`flexq_mxfp4.readplan`, the math in :mod:`flexq_mxfp4.decode`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

import flexq
from flexq import Checkpoint, FormatError, LogicalTensor, ReadPlan, TargetSlice
from flexq_mxfp4.decode import dequantize
from flexq_mxfp4.detect import FORMAT, analyze
from flexq_mxfp4.encode import quantize
from flexq_mxfp4.readplan import covering_blocks, local_plan, trim_of

if TYPE_CHECKING:
    from pathlib import Path

    from flexq_mxfp4.layout import MxTensor

FORMAT_NAME = FORMAT


@flexq.hookimpl
def flexq_quant_methods() -> tuple[str, ...]:
    return ("mxfp4", "compressed-tensors/mxfp4-pack-quantized")


@flexq.hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor]:
    found = analyze(checkpoint)
    return {k: LogicalTensor(t.shape, found.dtype) for k, t in found.tensors.items()}


@flexq.hookimpl
def flexq_recognized_keys(checkpoint: Checkpoint) -> frozenset[str]:
    return analyze(checkpoint).recognized


@flexq.hookimpl
def flexq_source_keys(checkpoint: Checkpoint, logical_key: str) -> list[str]:
    t = _tensor(checkpoint, logical_key)
    return [t.packed_key, t.scale_key]


@flexq.hookimpl
def flexq_read_plan(
    checkpoint: Checkpoint, logical_key: str, target: TargetSlice, force_global: bool
) -> ReadPlan | None:
    if force_global:
        return None  # the core builds the whole-source plan
    return local_plan(_tensor(checkpoint, logical_key), target)


@flexq.hookimpl
def flexq_apply(
    checkpoint: Checkpoint,
    logical_key: str,
    sources: Mapping[str, Any],
    plan: ReadPlan,
    output_dtype: str,
    out: Any,
) -> Any:
    t = _tensor(checkpoint, logical_key)
    packed, scales = sources[t.packed_key], sources[t.scale_key]
    target = plan.target
    want = (*target.local_shape[:-1], covering_blocks(t, target)[1])
    if tuple(scales.shape) != want:
        raise FormatError(
            f"{checkpoint.path}: format {FORMAT!r}: {logical_key!r} got scales "
            f"{t.scale_key!r} of shape {tuple(scales.shape)}, its plan needs {want}"
        )
    if t.layout == "gpt-oss":
        # [..., g, 16] -> [..., g*16]: the blocks of one row are contiguous bytes.
        shape = tuple(packed.shape)
        packed = packed.reshape([*shape[:-2], shape[-2] * shape[-1]])
    return dequantize(packed, scales, trim_of(target), target.local_shape[-1], out)


def _tensor(checkpoint: Checkpoint, logical_key: str) -> MxTensor:
    try:
        return analyze(checkpoint).tensors[logical_key]
    except KeyError:
        raise FormatError(
            f"{checkpoint.path}: format {FORMAT!r} has no logical tensor {logical_key!r}"
        ) from None


#: Smallest logits cosine similarity promised for a model loaded from MXFP4
#: weights (E2M1 keeps one mantissa bit per element, one power-of-two per 32).
MIN_LOGITS_COSINE = 0.90
#: What llm-compressor writes for ``mxfp4-pack-quantized`` linears.
CT_MXFP4_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "mxfp4-pack-quantized",
    "config_groups": {
        "group_0": {
            "format": "mxfp4-pack-quantized",
            "targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "float", "group_size": 32, "strategy": "group"},
        }
    },
}


@flexq.hookimpl
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, flexq.RawTensor]
) -> float:
    tensors = {**others, **quantize(weights, layout="compressed-tensors")}
    flexq.save_checkpoint(directory, tensors, config={"quantization_config": CT_MXFP4_CONFIG})
    return MIN_LOGITS_COSINE
