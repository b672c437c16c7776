"""The built-in passthrough owner: plain tensors no format claims are their own logical tensors.

Registered first in every registry, like pluggy's default plugins, and called
through the same hooks as any format. The composer gives it only the physical
tensors no format uses; it reads each tensor's box unchanged and leaves the one
cast to the target dtype to the core (exact widening, one rounding when
narrowing). It never passes through what looks quantized (DESIGN invariant 8):
:func:`looks_quantized` says why a tensor looks so, and the composer refuses
such tensors unless the caller opted in. Its hook implementations take only the
arguments they read (pluggy passes a hookimpl the ones it names).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from flexq.io.dtypes import dtype
from flexq.numerics.arrays import is_paddle
from flexq.numerics.rounding import bfloat16_bits_to_float32
from flexq.plan import LogicalTensor, ReadPlan, TargetSlice
from flexq.plugin.published import COMPANIONS
from flexq.plugin.spec import hookimpl

if TYPE_CHECKING:
    from flexq.io.checkpoint import Checkpoint
    from flexq.io.header import TensorInfo

NAME = "passthrough"

#: Last name components that only quantized checkpoints carry, with who writes them
#: (the producers' names; a first-party format's own names the guard would miss are
#: generated into :data:`flexq.plugin.published.COMPANIONS`, no line here).
QUANT_COMPANIONS = {
    "qweight": "GPTQ / AWQ packed weights",
    "qzeros": "GPTQ / AWQ zero points",
    "g_idx": "GPTQ act-order group index",
    "weight_packed": "compressed-tensors packed weights",
    "weight_zero_point": "compressed-tensors zero points",
    "weight_g_idx": "compressed-tensors act-order group index",
    "weight_shape": "compressed-tensors packed-weight shape",
    "weight_global_scale": "NVFP4 global scale",
    "weight_scale_2": "ModelOpt NVFP4 second-level scale",
    "SCB": "bitsandbytes LLM.int8 row scales",
    "weight_format": "bitsandbytes LLM.int8 layout tag",
    "absmax": "bitsandbytes 4-bit block scales",
    "quant_map": "bitsandbytes 4-bit code book",
    "nested_absmax": "bitsandbytes double-quant scales",
    "nested_quant_map": "bitsandbytes double-quant code book",
}


def looks_quantized(
    key: str, info: TensorInfo, companions: Mapping[str, str] = COMPANIONS
) -> str | None:
    """Why tensor ``key`` looks like part of a quantized weight, or None.

    Quantized checkpoints give themselves away by companion names (packed words,
    zero points, group indexes, quant states) and by integer weights; a plain
    checkpoint has neither. Activation and cache scales (``input_scale``,
    ``k_scale``) are plain floats and do not count.

    :param companions: the first-party formats' own companion names (generated;
        ``{}`` gives the hand-kept rules alone, which the generator measures against).
    """
    last = key.rsplit(".", 1)[-1]
    if last in QUANT_COMPANIONS:
        return QUANT_COMPANIONS[last]
    if last in companions:
        return companions[last]
    if ".quant_state." in f".{key}" or last.startswith("quant_state"):
        return "bitsandbytes quant state"
    if last in ("weight", "weight_blocks") and dtype(info.dtype).kind in ("int", "element"):
        return f"a weight stored as {info.dtype} integers"
    return None


#: Checkpoint dtypes of tensors that are plain values to every format.
_PLAIN_DTYPES = frozenset({"BF16", "F16", "F32", "F64"})
#: Parts of a last name component that a format's companion tensor may carry (a scale
#: beside a plain weight is an orphan some format must report).
_COMPANION_PARTS = ("scale", "zero", "idx", "absmax", "quant", "pack", "shape", "format")


def plain_to_every_format(key: str, info: TensorInfo) -> bool:
    """Whether no format could claim or recognize tensor ``key``: a float that neither
    looks quantized nor is named like a companion (scale, zero point, group index).
    Conservative, for the composer: a tensor for which this is False makes it ask
    every installed format, as it would without deferral."""
    last = key.rsplit(".", 1)[-1].lower()
    return (
        info.dtype in _PLAIN_DTYPES
        and looks_quantized(key, info) is None
        and not any(part in last for part in _COMPANION_PARTS)
    )


@hookimpl
def flexq_logical_metadata(checkpoint: Checkpoint) -> dict[str, LogicalTensor]:
    """Every physical tensor Paddle has a dtype for, as itself."""
    found = {}
    for key, info in checkpoint.tensors.items():
        paddle = dtype(info.dtype).paddle
        if paddle is not None:
            found[key] = LogicalTensor(info.shape, paddle)
    return found


@hookimpl
def flexq_source_keys(logical_key: str) -> list[str]:
    return [logical_key]


@hookimpl
def flexq_read_plan(logical_key: str, target: TargetSlice, force_global: bool) -> ReadPlan:
    if force_global:
        whole = TargetSlice.whole(target.global_shape, target.dtype)
        return ReadPlan("global", {logical_key: whole.box}, whole)
    return ReadPlan("local", {logical_key: target.box}, target)


@hookimpl
def flexq_apply(
    checkpoint: Checkpoint, logical_key: str, sources: Mapping[str, Any], output_dtype: str
) -> Any:
    x = sources[logical_key]
    # numpy holds BF16 as raw bits: widen them (exactly) before any other rounding.
    bf16 = checkpoint.info(logical_key).dtype == "BF16"
    if bf16 and output_dtype != "bfloat16" and not is_paddle(x):
        return bfloat16_bits_to_float32(x)
    return x
