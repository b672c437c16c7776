"""One compressed-tensors integer linear: its tensors and their geometry.

Built by :mod:`flexq_ct_int.detect`, read by :mod:`flexq_ct_int.plan` and
:mod:`flexq_ct_int.decode`. Every strategy is a grid of scale blocks over the
logical ``[out, in]`` weight: tensor ``(out, in)``, channel ``(1, in)``, group
``(1, g)``, block ``(b0, b1)``; the stored scale is ``ceil(out/b0) x
ceil(in/b1)`` (tensor: ``(1,)``). Group act-order replaces the column blocks
by ``weight_g_idx``: column ``i`` uses group ``g_idx[i]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flexq_ct_int.packing import Packing, offset_of

#: How the zero point is stored: absent (symmetric), packed along out (I32
#: words, group and channel strategies of pack-quantized), or one integer per
#: scale entry in the scale's shape (int-quantized; tensor/block pack-quantized).
ZeroKind = Literal["none", "packed", "raw"]
Kind = Literal["pack-quantized", "int-quantized"]


@dataclass(frozen=True)
class CtLinear:
    """How one logical ``X.weight`` is stored.

    :ivar key: the logical key, ``X.weight``.
    :ivar kind: ``pack-quantized`` (``X.weight_packed`` I32) or ``int-quantized`` (``X.weight`` I8).
    :ivar bits: code width (int-quantized: 8, the I8 storage).
    :ivar block: scale block edges over (out, in).
    :ivar scale_grid: ``ceil(shape / block)``, the scale's stored shape as 2-D.
    :ivar scale_dtype: safetensors dtype of the scale (F32, F16, BF16).
    :ivar zero: how the zero point is stored; ``zero_key`` names it.
    :ivar shape_key: ``X.weight_shape`` (pack-quantized only).
    :ivar gidx_key: ``X.weight_g_idx`` (group act-order only).
    :ivar dense: odd widths packed as one bit stream (compressed-tensors >= 0.18),
        else ``32 // bits`` codes per word (0.17); see :mod:`flexq_ct_int.packing`.
    :ivar dtype: natural Paddle dtype of the logical weight (one per checkpoint).
    """

    key: str
    kind: Kind
    weight_key: str
    scale_key: str
    out_features: int
    in_features: int
    bits: int
    block: tuple[int, int]
    scale_grid: tuple[int, int]
    scale_shape: tuple[int, ...]
    scale_dtype: str
    zero: ZeroKind
    zero_key: str | None
    zero_dtype: str | None
    shape_key: str | None
    gidx_key: str | None
    dense: bool = True
    dtype: str = "bfloat16"

    @property
    def shape(self) -> tuple[int, int]:
        return self.out_features, self.in_features

    @property
    def packed(self) -> bool:
        return self.kind == "pack-quantized"

    @property
    def packing(self) -> Packing:
        """Where the codes of a packed row (or zero-point column) sit."""
        return Packing(self.bits, self.dense)

    @property
    def per_word(self) -> int:
        """Codes per stored item along in for widths dividing 8 (``32 / bits`` per
        int32 word, 1 per I8 byte)."""
        return self.packing.per_word if self.packed else 1

    @property
    def code_offset(self) -> int:
        """What the stored code adds to the signed value (``2^(bits-1)``; 0 for I8)."""
        return offset_of(self.bits) if self.packed else 0

    @property
    def sources(self) -> list[str]:
        keys = [self.weight_key, self.scale_key, self.zero_key, self.gidx_key, self.shape_key]
        return [k for k in keys if k is not None]
