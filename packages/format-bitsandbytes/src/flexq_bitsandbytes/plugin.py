"""bitsandbytes: NF4/FP4 4-bit (with or without double quantization) and LLM.int8 weights.

The flexq hook implementations of the ``bitsandbytes`` format (entry point
``flexq_bitsandbytes.plugin``). Detection lives in :mod:`flexq_bitsandbytes.detect`,
plans in :mod:`flexq_bitsandbytes.plan`, the math in :mod:`flexq_bitsandbytes.decode`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

import flexq
from flexq import Checkpoint, FormatError, LogicalTensor, ReadPlan, TargetSlice
from flexq_bitsandbytes.arrayops import bnb_ops_for
from flexq_bitsandbytes.codebook import CODE_BOOKS
from flexq_bitsandbytes.config import FORMAT
from flexq_bitsandbytes.decode import absmax_values, dequantize_four_bit, dequantize_int8
from flexq_bitsandbytes.detect import analyze
from flexq_bitsandbytes.encode import quantization_config, quantize
from flexq_bitsandbytes.layout import ROW_FORMAT, FourBit, Int8
from flexq_bitsandbytes.plan import covering_blocks, four_bit_boxes, local_plan

if TYPE_CHECKING:
    from pathlib import Path

FORMAT_NAME = FORMAT


@flexq.hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor]:
    return {k: LogicalTensor(t.shape, t.dtype) for k, t in analyze(checkpoint).tensors.items()}


@flexq.hookimpl
def flexq_recognized_keys(checkpoint: Checkpoint) -> frozenset[str]:
    return analyze(checkpoint).recognized


@flexq.hookimpl
def flexq_quant_methods() -> list[str]:
    return [FORMAT]


@flexq.hookimpl
def flexq_source_keys(checkpoint: Checkpoint, logical_key: str) -> list[str]:
    return _tensor(checkpoint, logical_key).sources


@flexq.hookimpl
def flexq_read_plan(
    checkpoint: Checkpoint, logical_key: str, target: TargetSlice, force_global: bool
) -> ReadPlan | None:
    if force_global:
        return None  # the core builds the whole-source plan
    t = _tensor(checkpoint, logical_key)
    shape = checkpoint.info(t.format_key).shape if isinstance(t, Int8) and t.format_key else ()
    return local_plan(t, target, shape)


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
    if isinstance(t, Int8):
        return _apply_int8(checkpoint, t, sources, plan, out)
    return _apply_four_bit(checkpoint, t, sources, plan, out)


def _apply_four_bit(
    ckpt: Checkpoint, t: FourBit, sources: Mapping[str, Any], plan: ReadPlan, out: Any
) -> Any:
    target = plan.target
    boxes = four_bit_boxes(t, target)
    for key, (_, shape) in boxes.items():  # the blob's box included, though unused here
        got = tuple(sources[key].shape)
        if got != tuple(shape):
            raise FormatError(
                f"{ckpt.info(key).file}: format {FORMAT!r}: {t.key!r} got {key!r} of shape "
                f"{got}, its plan needs {tuple(shape)}"
            )
    _check_book(ckpt, t, sources[t.quant_map_key])
    first, _ = covering_blocks(t, target)
    # NaN/inf scales were checked by the core before any write (ReadPlan.scales).
    nested = t.nested
    scale = absmax_values(
        t,
        sources[t.absmax_key],
        sources[nested.absmax_key] if nested is not None else None,
        sources[nested.quant_map_key] if nested is not None else None,
        first,
    )
    return dequantize_four_bit(t, sources[t.key], scale, target, out)


def _check_book(ckpt: Checkpoint, t: FourBit, stored: Any) -> None:
    """The stored ``quant_map`` must be bnb's code book (its kernels ignore the stored one)."""
    values = bnb_ops_for(stored).host(stored).astype(np.float32).reshape(-1)
    if not np.array_equal(values, CODE_BOOKS[t.quant_type]):
        raise FormatError(
            f"{ckpt.info(t.quant_map_key).file}: tensor {t.quant_map_key!r} is not the "
            f"{t.quant_type} code book bitsandbytes decodes with (format {FORMAT!r}): "
            f"{values.tolist()}"
        )


def _apply_int8(
    ckpt: Checkpoint, t: Int8, sources: Mapping[str, Any], plan: ReadPlan, out: Any
) -> Any:
    codes, scb = sources[t.key], sources[t.scb_key]
    if t.format_key is not None:
        fmt = bnb_ops_for(codes).host(sources[t.format_key]).reshape(-1)
        if fmt.size != 1 or int(fmt[0]) != ROW_FORMAT:
            raise FormatError(
                f"{ckpt.info(t.format_key).file}: tensor {t.format_key!r} is "
                f"{fmt.tolist()}; bitsandbytes loads only row-major int8 weights "
                f"(weight_format {ROW_FORMAT}) (format {FORMAT!r})"
            )
    rows = plan.target.local_shape[0]
    if tuple(scb.shape) != (rows,) or tuple(codes.shape) != tuple(plan.target.local_shape):
        raise FormatError(
            f"{ckpt.info(t.key).file}: format {FORMAT!r}: {t.key!r} got codes "
            f"{tuple(codes.shape)} and SCB {tuple(scb.shape)} for a box of "
            f"{plan.target.local_shape}"
        )
    return dequantize_int8(codes, scb, out)


def _tensor(checkpoint: Checkpoint, logical_key: str) -> FourBit | Int8:
    try:
        return analyze(checkpoint).tensors[logical_key]
    except KeyError:
        raise FormatError(
            f"{checkpoint.path}: format {FORMAT!r} has no logical tensor {logical_key!r}"
        ) from None


#: Smallest logits cosine similarity promised for a model loaded from NF4 weights
#: with double quantization (16 levels per block of 64, absmax coded in 8 bits).
MIN_LOGITS_COSINE = 0.93


@flexq.hookimpl
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, flexq.RawTensor]
) -> float:
    tensors = {**others, **quantize(weights, mode="nf4", double_quant=True)}
    flexq.save_checkpoint(
        directory, tensors, config={"quantization_config": quantization_config("nf4")}
    )
    return MIN_LOGITS_COSINE
