"""The kept weight forms a :class:`~flexq.nn.QuantizedLinear` holds, and their dequantization.

For users serving kept weights (issue 26) and for the layer itself: a
:class:`KeptForm` says how a ``[N, K]`` weight (``N`` outputs, ``K`` inputs,
quantization axis last) is stored, as documented in ``docs/formats.md`` and
``docs/serving.md``; :func:`dequantize` turns the stored parts into the float32
weight with the decoders the formats themselves use (``flexq_fp8``,
``flexq_mxfp4``, ``flexq_nvfp4``), so a kept load and a dequantized load of the
same checkpoint give the same numbers bit for bit. Nothing here decodes a second
time: a form whose format package is not installed is a :class:`~flexq.errors.PluginError`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

from flexq.errors import PluginError, TargetError
from flexq.plan import ceil_div

#: The kinds of kept weight: FP8 E4M3 with a per-tensor, per-channel or block scale
#: grid, MXFP4 (E2M1 codes, E8M0 scales a 32-block), NVFP4 (E2M1 codes, E4M3 scales
#: a 16-block, one float32 global scale).
Kind = Literal["fp8", "mxfp4", "nvfp4"]
#: How FP8 scales are stored: float32 values, or E8M0 exponents (the ue8m0 form).
Fp8Scales = Literal["float32", "e8m0"]
#: NVFP4 producers whose dequant convention the kept form follows (``flexq_nvfp4``):
#: compressed-tensors ``e2m1 * (s / g)``, ModelOpt ``e2m1 * (s * g)``, auto-round
#: ``(e2m1 * (1 / g)) * s``.
Producer = Literal["compressed-tensors", "modelopt", "auto-round"]

#: elements a scale covers along K, for the FP4 kinds.
_FP4_BLOCK = {"mxfp4": 32, "nvfp4": 16}
#: format package that decodes each kind.
_PACKAGE = {"fp8": "flexq_fp8", "mxfp4": "flexq_mxfp4", "nvfp4": "flexq_nvfp4"}


@dataclass(frozen=True)
class KeptForm:
    """How one kept ``[out_features, in_features]`` weight is stored.

    :ivar block: the scale block ``(bn, bk)``: ``(N, K)`` for one FP8 scale per
        tensor, ``(1, K)`` per channel, the checkpoint's block otherwise; ``(1, 32)``
        for MXFP4, ``(1, 16)`` for NVFP4.
    :ivar scale_dtype: FP8 only: float32 scales or E8M0 exponents.
    :ivar producer: NVFP4 only: whose dequant convention the scales follow.
    :ivar per_tensor: FP8 only: one scale ``[]`` for the tensor (a block form that is
        one block, such as a tensor-parallel shard of exactly one block, keeps its
        ``[1, 1]`` grid).
    """

    kind: Kind
    out_features: int
    in_features: int
    block: tuple[int, int]
    scale_dtype: Fp8Scales = "float32"
    producer: Producer = "compressed-tensors"
    per_tensor: bool = False

    @property
    def grid(self) -> tuple[int, int]:
        """The scale grid over the weight (a partial last block counts)."""
        bn, bk = self.block
        return ceil_div(self.out_features, bn), ceil_div(self.in_features, bk)

    @property
    def values_shape(self) -> tuple[int, int]:
        """The stored values: ``[N, K]`` E4M3 bytes, or ``[N, K/2]`` E2M1 pairs."""
        n, k = self.out_features, self.in_features
        return (n, k) if self.kind == "fp8" else (n, k // 2)

    @property
    def values_dtype(self) -> str:
        """The Paddle dtype of the stored values."""
        return "float8_e4m3fn" if self.kind == "fp8" else "uint8"

    @property
    def scales_shape(self) -> tuple[int, ...]:
        """``[]`` for one FP8 scale per tensor, else the grid."""
        if self.kind == "fp8" and self.per_tensor:
            return ()
        return self.grid

    @property
    def scales_dtype(self) -> str:
        """The Paddle dtype of the stored scales."""
        if self.kind == "nvfp4":
            return "float8_e4m3fn"
        if self.kind == "mxfp4" or self.scale_dtype == "e8m0":
            return "uint8"
        return "float32"

    @property
    def has_global_scale(self) -> bool:
        """NVFP4 weights carry one float32 global scale ``[1]``."""
        return self.kind == "nvfp4"


def fp8_form(
    out_features: int,
    in_features: int,
    granularity: Literal["tensor", "channel", "block"] = "block",
    block: tuple[int, int] = (128, 128),
    scale_dtype: Fp8Scales = "float32",
) -> KeptForm:
    """An FP8 E4M3 form: one scale per tensor, per output channel, or per ``block``."""
    if granularity == "tensor":
        block = (out_features, in_features)
    elif granularity == "channel":
        block = (1, in_features)
    tensor = granularity == "tensor"
    return KeptForm("fp8", out_features, in_features, block, scale_dtype, per_tensor=tensor)


def fp4_form(
    kind: Literal["mxfp4", "nvfp4"],
    out_features: int,
    in_features: int,
    producer: Producer = "compressed-tensors",
) -> KeptForm:
    """An MXFP4 or NVFP4 form (``in_features`` even: two codes a byte)."""
    if in_features % 2:
        raise TargetError(
            f"{kind} kept weight [{out_features}, {in_features}]: in_features must be even "
            "(two E2M1 codes a byte)"
        )
    return KeptForm(kind, out_features, in_features, (1, _FP4_BLOCK[kind]), producer=producer)


def dequantize(form: KeptForm, values: Any, scales: Any, global_scale: Any = None) -> Any:
    """The float32 ``[N, K]`` weight of a kept form, as the form's format decodes it.

    :param values: the stored values as bytes (numpy uint8, or a Paddle uint8 tensor
        on its device), of :attr:`KeptForm.values_shape`.
    :param scales: the stored scales (uint8 bytes for E8M0/E4M3 scales, float32
        otherwise), of :attr:`KeptForm.scales_shape`.
    :param global_scale: NVFP4's float32 global scale ``[1]``.
    :return: numpy or Paddle float32, like ``values``.
    """
    decode = _module(form.kind, "decode")
    k = form.in_features
    if form.kind == "mxfp4":
        return decode.dequantize(values, scales, 0, k)
    if form.kind == "nvfp4":
        pairs = decode.element_pairs(form.producer, global_scale)
        effective = decode.effective_scales(form.producer, scales, global_scale)
        return decode.dequantize(pairs, values, effective, 0, k)
    layout = _module("fp8", "layout").Fp8Layout(
        weight_key="weight",
        scale_key="weight_scale_inv",
        scale_dtype="U8" if form.scale_dtype == "e8m0" else "F32",
        shape=(form.out_features, k),
        block=form.block,
        scale_shape=tuple(int(d) for d in scales.shape),
        dtype="float32",
    )
    return decode.dequantize(layout, values, scales, (0, 0), (form.out_features, k))


def _module(kind: Kind, name: str) -> Any:
    package = _PACKAGE[kind]
    try:
        return importlib.import_module(f"{package}.{name}")
    except ImportError:
        dist = package.replace("_", "-").replace("flexq-", "flexq-format-")
        raise PluginError(
            f"a {kind} kept weight is decoded by {package}: pip install {dist}"
        ) from None
