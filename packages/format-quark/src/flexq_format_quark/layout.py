"""The schemes of a Quark export this format decodes, and the geometry of one linear.

Facts from amd-quark 0.13 (``quark/torch/export/nn/modules/realquantizer.py``,
``quark/torch/utils/pack.py``, ``quark/torch/kernel/hw_emulation``), with the
``quark`` export mode (``X.weight``, ``X.weight_scale``, ``X.weight_zero_point``):

- ``fp8-tensor``: ``weight`` F8_E4M3 [out, in], ``weight_scale`` 0-d;
  W = e4m3(q) * s.
- ``fp8-channel`` (PTPC): ``weight`` F8_E4M3 [out, in], ``weight_scale`` [out];
  W[o, i] = e4m3(q[o, i]) * s[o].
- ``int4-group`` / ``uint4-group``: ``weight`` I32 [in, out/8] and
  ``weight_zero_point`` I32 [in/g, out/8] packed along out (``Pack_4_bits``: the
  [out, in] codes are transposed, then 8 per word, slot i = column 8c + order[i]
  with AutoAWQ's GEMM order under ``pack_method: reorder``, sequential under
  ``order``); ``weight_scale`` [in/g, out]. int4 codes and zeros are two's
  complement nibbles. W[o, i] = (q - z) * s per group, in float32
  (``dequantize_int_per_group_affine``).
- ``mxfp4``: ``weight`` U8 [out, in/2], E2M1 codes two per byte, low nibble first
  (``Pack_fp4``); ``weight_scale`` U8 [out, in/32] E8M0 exponents;
  W = e2m1(q) * 2^(e - 127).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flexq.formatkit import FLOAT_SCALE_DTYPES

Kind = Literal["fp8-tensor", "fp8-channel", "int4-group", "uint4-group", "mxfp4"]

#: 4-bit codes per int32 word.
PACK = 8
#: elements per MXFP4 scale (OCP MX block).
MX_BLOCK = 32
#: ``pack_method: reorder``: logical element j of eight is read from slot REORDER[j]
#: (Quark's unpack ORDER; AutoAWQ's GEMM reverse order).
REORDER = (0, 4, 1, 5, 2, 6, 3, 7)
#: ``pack_method: order``: element j is in slot j.
SEQUENTIAL = tuple(range(PACK))
#: The weight's stored dtype per scheme.
WEIGHT_DTYPES: dict[Kind, str] = {
    "fp8-tensor": "F8_E4M3",
    "fp8-channel": "F8_E4M3",
    "int4-group": "I32",
    "uint4-group": "I32",
    "mxfp4": "U8",
}
#: Scale dtypes per scheme (Quark keeps float scales in the model's dtype; MXFP4's are E8M0).
SCALE_DTYPES: dict[Kind, frozenset[str]] = {
    "fp8-tensor": frozenset(FLOAT_SCALE_DTYPES),
    "fp8-channel": frozenset(FLOAT_SCALE_DTYPES),
    "int4-group": frozenset(FLOAT_SCALE_DTYPES),
    "uint4-group": frozenset(FLOAT_SCALE_DTYPES),
    "mxfp4": frozenset({"U8", "F8_E8M0"}),
}


@dataclass(frozen=True)
class QuarkLinear:
    """One quantized linear of a Quark export: the logical ``X.weight`` [out, in].

    :ivar prefix: the module name ``X``.
    :ivar kind: its scheme.
    :ivar group_size: elements per scale along in (int4/uint4 groups, MXFP4 blocks);
        ``in_features`` for FP8.
    :ivar scale_dtype: safetensors dtype of ``X.weight_scale``.
    :ivar dtype: the logical weight's natural Paddle dtype.
    :ivar scale_ndim: the stored scale's rank (FP8 scales may be 0-d or ``[out]``).
    :ivar slots: for int4/uint4, the slot of each logical element of eight.
    """

    prefix: str
    kind: Kind
    out_features: int
    in_features: int
    group_size: int
    scale_dtype: str
    dtype: str
    scale_ndim: int = 2
    slots: tuple[int, ...] = SEQUENTIAL

    @property
    def weight(self) -> str:
        return f"{self.prefix}.weight"

    @property
    def scale(self) -> str:
        return f"{self.prefix}.weight_scale"

    @property
    def zero(self) -> str:
        return f"{self.prefix}.weight_zero_point"

    @property
    def packed(self) -> bool:
        """int4/uint4: words packed along out, stored transposed."""
        return self.kind in ("int4-group", "uint4-group")

    @property
    def shape(self) -> tuple[int, int]:
        return self.out_features, self.in_features

    @property
    def sources(self) -> tuple[str, ...]:
        if self.packed:
            return self.weight, self.zero, self.scale
        return self.weight, self.scale
