"""Find the quantized linears of a Quark export from config.json and the tensor headers.

Used by the plugin hooks; reads no tensor data and analyzes a checkpoint once
(:func:`analyze` is memoized with :func:`flexq.formatkit.cached_per_checkpoint`). Every
``X.weight`` with an ``X.weight_scale`` beside it, or stored as F8/integers, is a
quantized linear; its scheme is the weight spec Quark's config gives module ``X``
(:meth:`flexq_format_quark.config.QuarkConfig.weight_spec`). Rules:

- a scheme this format does not decode exactly (FP8 E5M2, per-block FP8, int8,
  two-stage or dynamic weights, inline-scale ``mx`` ...) is a FormatError naming
  the tensor, the scheme and what to do: never a pass-through of codes;
- a quantized-looking weight in an excluded module (or one with no weight spec) is
  an error; so is a weight without its ``weight_scale`` or, for int4/uint4, its
  ``weight_zero_point``;
- ``weight_scale`` / ``weight_zero_point`` without their weight are recognized, so
  the core reports them as orphans;
- ``input_scale`` / ``output_scale`` (static activation scales) are not weights:
  passed through untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq import Checkpoint, FormatError
from flexq.formatkit import Analysis, cached_per_checkpoint, natural_dtype
from flexq_format_quark.config import FORMAT_NAME, QuarkConfig, TensorSpec, read_config
from flexq_format_quark.layout import (
    MX_BLOCK,
    PACK,
    REORDER,
    SCALE_DTYPES,
    SEQUENTIAL,
    WEIGHT_DTYPES,
    Kind,
    QuarkLinear,
)

if TYPE_CHECKING:
    from flexq.io.header import TensorInfo

#: Companions this format claims (by last name component).
COMPANIONS = ("weight_scale", "weight_zero_point")
#: Stored dtypes that say a ``weight`` is quantized.
_CODE_DTYPES = frozenset({"F8_E4M3", "F8_E5M2", "I32", "U8", "I8", "F4"})


@cached_per_checkpoint
def analyze(ckpt: Checkpoint) -> Analysis[QuarkLinear] | None:
    """The quantized linears of ``ckpt`` (logical key ``X.weight`` -> its layout, and
    every ``weight_scale`` / ``weight_zero_point`` as recognized), or None when its
    config does not say ``quant_method: quark``.

    :raises FormatError: on an unsupported scheme or a broken linear.
    """
    config = read_config(ckpt)
    if config is None:
        return None
    recognized = frozenset(k for k in ckpt.tensors if k.rsplit(".", 1)[-1] in COMPANIONS)
    found: dict[str, QuarkLinear] = {}
    for key in sorted(ckpt.tensors):
        if not key.endswith(".weight"):
            continue
        prefix = key.removesuffix(".weight")
        info = ckpt.tensors[key]
        if f"{prefix}.weight_scale" not in ckpt.tensors and info.dtype not in _CODE_DTYPES:
            continue  # a plain float weight (norms, embeddings, excluded linears)
        linear = _linear(ckpt, config, prefix, info)
        found[linear.weight] = linear
    return Analysis(found, recognized)


def _fail(info: TensorInfo, msg: str) -> FormatError:
    return FormatError(f"{info.file}: tensor {info.key!r}: {msg} (format {FORMAT_NAME!r})")


def _kind(spec: TensorSpec | list[TensorSpec], info: TensorInfo, origin: str) -> Kind:
    """The scheme of one weight spec, or a FormatError saying what is not decoded."""
    if isinstance(spec, list):
        names = " + ".join(s.describe() for s in spec)
        raise _fail(
            info,
            f"{origin} gives a two-stage weight scheme ({names}); flexq decodes "
            "single-stage Quark schemes only (FP8 per tensor / per channel, int4 and "
            "uint4 per group, MXFP4): re-export with one of those",
        )
    if spec.is_dynamic:
        raise _fail(info, f"{origin} marks the weight scheme {spec.describe()} dynamic")
    kind: Kind | None = None
    if spec.dtype == "fp8_e4m3" and spec.qscheme == "per_tensor":
        kind = "fp8-tensor"
    elif spec.dtype == "fp8_e4m3" and spec.qscheme == "per_channel" and spec.ch_axis in (0, None):
        kind = "fp8-channel"
    elif spec.dtype in ("int4", "uint4") and spec.qscheme == "per_group" and spec.group_size:
        kind = "int4-group" if spec.dtype == "int4" else "uint4-group"
    elif (
        spec.dtype == "fp4"
        and spec.qscheme == "per_group"
        and spec.group_size == MX_BLOCK
        and spec.scale_format == "e8m0"
    ):
        kind = "mxfp4"
    if kind is None:
        raise _fail(
            info,
            f"{origin} gives weight scheme {spec.describe()}, which flexq does not decode "
            "(decoded: fp8_e4m3 per_tensor / per_channel, int4 and uint4 per_group, "
            "fp4 per_group 32 with e8m0 scales = MXFP4); re-export with one of those "
            "or convert the model with Quark to bf16 first",
        )
    return kind


def _linear(ckpt: Checkpoint, config: QuarkConfig, prefix: str, info: TensorInfo) -> QuarkLinear:
    """Check one quantized-looking ``prefix.weight`` and its companions; describe it."""
    spec, origin = config.weight_spec(prefix)
    if spec is None:
        raise _fail(
            info,
            f"is stored as {info.dtype} with a weight_scale but {origin} of "
            f"{config.where} leaves module {prefix!r} unquantized; use the config.json "
            "that came with these tensors",
        )
    kind = _kind(spec, info, f"{config.where}.{origin}")
    want = WEIGHT_DTYPES[kind]
    if info.dtype != want or len(info.shape) != 2:
        raise _fail(
            info,
            f"has dtype {info.dtype} and shape {info.shape}; Quark's {kind} weight is a "
            f"2-D {want} tensor",
        )
    scale = ckpt.tensors.get(f"{prefix}.weight_scale")
    if scale is None:
        raise _fail(info, f"has no companion {prefix}.weight_scale (missing component)")
    if scale.dtype not in SCALE_DTYPES[kind]:
        allowed = " or ".join(sorted(SCALE_DTYPES[kind]))
        raise _fail(scale, f"has dtype {scale.dtype}, expected {allowed} for {kind}")
    rows, cols = info.shape
    if kind in ("int4-group", "uint4-group"):
        out_f, in_f = cols * PACK, rows
    elif kind == "mxfp4":
        out_f, in_f = rows, cols * 2
    else:
        out_f, in_f = rows, cols
    g = in_f
    if kind in ("int4-group", "uint4-group", "mxfp4"):
        # _kind refused two-stage (list) specs, and int4/uint4 need a group_size.
        g = MX_BLOCK if kind == "mxfp4" else int(getattr(spec, "group_size", 0) or 0)
        if in_f == 0 or in_f % g:
            raise _fail(
                info,
                f"has shape {info.shape}: in_features {in_f} is not a positive multiple of "
                f"the group size {g} ({kind})",
            )
    scale_shape = {
        "fp8-tensor": ((), (1,)),
        "fp8-channel": ((out_f,), (out_f, 1)),
        "int4-group": ((in_f // g, out_f),),
        "uint4-group": ((in_f // g, out_f),),
        "mxfp4": ((out_f, in_f // g),),
    }[kind]
    if scale.shape not in scale_shape:
        raise _fail(
            scale,
            f"has shape {scale.shape}, expected {scale_shape[0]} for {kind} weight "
            f"{info.key!r} {info.shape}",
        )
    slots = SEQUENTIAL
    dtype = natural_dtype(ckpt)
    if kind in ("int4-group", "uint4-group"):
        slots = REORDER if config.reorder else SEQUENTIAL
        zero = ckpt.tensors.get(f"{prefix}.weight_zero_point")
        if zero is None:
            raise _fail(info, f"has no companion {prefix}.weight_zero_point (missing component)")
        if zero.dtype != "I32" or zero.shape != (in_f // g, cols):
            raise _fail(
                zero,
                f"has dtype {zero.dtype} and shape {zero.shape}, expected I32 "
                f"{(in_f // g, cols)} for {kind} weight {info.key!r} {info.shape}",
            )
    return QuarkLinear(prefix, kind, out_f, in_f, g, scale.dtype, dtype, len(scale.shape), slots)
