"""Where the bytes of one NVFP4 logical tensor live, for the detector, the planner and the decoder.

Producers store NVFP4 (16 E2M1 elements along the last axis share one E4M3
scale byte, and the whole tensor shares one float32 scale) under two sets of
names and three dequantization orders:

- compressed-tensors ``nvfp4-pack-quantized`` (llm-compressor, auto-round's
  ``llm_compressor`` export): ``X.weight_packed`` U8 [..., in/2] + ``X.weight_scale``
  F8_E4M3 [..., in/16] + ``X.weight_global_scale`` F32 [1], and W = e2m1 * (scale / global);
- auto-round's own format (``quant_method: "auto-round"``, ``data_type: "nv_fp"``):
  the same names, and W = (e2m1 * (1 / global)) * scale;
- NVIDIA ModelOpt: ``X.weight`` U8 [..., in/2] + ``X.weight_scale`` F8_E4M3
  [..., in/16] + ``X.weight_scale_2`` F32 (0-d or [1]), and W = e2m1 * (scale * scale_2).

All put element 2b in the LOW nibble of byte b. :class:`Nvfp4Tensor` hides
the differences behind source boxes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from flexq.plan import Box

#: elements sharing one E4M3 scale.
BLOCK = 16

#: Whose names and whose dequantization order a tensor follows.
Producer = Literal["compressed-tensors", "modelopt", "auto-round"]
#: The layouts the encoder writes.
Layout = Literal["compressed-tensors", "modelopt"]

CT_PACKED, CT_SCALE, CT_GLOBAL = ".weight_packed", ".weight_scale", ".weight_global_scale"
MO_WEIGHT, MO_SCALE, MO_GLOBAL = ".weight", ".weight_scale", ".weight_scale_2"
PACKED_DTYPE, SCALE_DTYPE, GLOBAL_DTYPE = "U8", "F8_E4M3", "F32"


@dataclass(frozen=True)
class Nvfp4Tensor:
    """One NVFP4 logical tensor and its three physical components.

    :ivar key: the logical key (``X.weight``).
    :ivar producer: which layout (and which global-scale rule) it uses.
    :ivar shape: logical shape [..., n]; n is the element count of the last axis.
    :ivar global_shape: stored shape of the global scale (one element).
    :ivar dtype: natural Paddle dtype of the logical tensor (the model's, else bfloat16).
    """

    key: str
    producer: Producer
    packed_key: str
    scale_key: str
    global_key: str
    shape: tuple[int, ...]
    global_shape: tuple[int, ...]
    dtype: str = "bfloat16"

    @property
    def n(self) -> int:
        """Elements along the blocked (last) axis."""
        return self.shape[-1]

    @property
    def sources(self) -> list[str]:
        return [self.packed_key, self.scale_key, self.global_key]

    def global_box(self) -> Box:
        """The whole global scale (one element, read by every plan)."""
        return (0,) * len(self.global_shape), self.global_shape


def n_blocks(n: int) -> int:
    """Blocks covering ``n`` elements (the last one may be partial)."""
    return -(-n // BLOCK)
