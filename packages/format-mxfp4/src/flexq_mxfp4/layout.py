"""Where the bytes of one MXFP4 logical tensor live, for the detector, the planner and apply.

Two producers store MXFP4 (32 E2M1 elements along the last axis share one
E8M0 scale byte), with different names and shapes:

- gpt-oss / Hugging Face: ``P_blocks`` [..., G, 16] + ``P_scales`` [..., G]
  make ``P`` [..., G*32];
- compressed-tensors ``mxfp4-pack-quantized``: ``X.weight_packed`` [..., in/2]
  + ``X.weight_scale`` [..., ceil(in/32)] make ``X.weight`` [..., in].

Packed values are ``U8`` (or ``F4``, whose header counts elements, so its last
dimension is twice the byte count); scales are ``U8`` or ``F8_E8M0``.
:class:`MxTensor` hides those differences behind source boxes in header
elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from flexq.plan import Box

#: elements sharing one scale (OCP MX v1.0).
BLOCK = 32
#: bytes holding one block of E2M1 codes.
BLOCK_BYTES = BLOCK // 2

Layout = Literal["gpt-oss", "compressed-tensors"]

GPT_OSS_BLOCKS, GPT_OSS_SCALES = "_blocks", "_scales"
CT_PACKED, CT_SCALE = "_packed", "_scale"
PACKED_DTYPES = ("U8", "F4")
SCALE_DTYPES = ("U8", "F8_E8M0")


@dataclass(frozen=True)
class MxTensor:
    """One MXFP4 logical tensor and its two physical components.

    :ivar shape: logical shape [..., n]; n is the element count of the last axis.
    :ivar packed_dtype: safetensors dtype of ``packed_key`` (``U8`` or ``F4``).
    """

    key: str
    layout: Layout
    packed_key: str
    scale_key: str
    shape: tuple[int, ...]
    packed_dtype: str

    @property
    def lead(self) -> tuple[int, ...]:
        """The axes before the blocked (last) axis."""
        return self.shape[:-1]

    @property
    def n(self) -> int:
        """Elements along the blocked axis."""
        return self.shape[-1]

    @property
    def n_bytes(self) -> int:
        """Bytes of packed codes along the blocked axis."""
        return self.n // 2

    def packed_box(
        self, lead_off: tuple[int, ...], lead_shape: tuple[int, ...], first: int, count: int
    ) -> Box:
        """Box of the packed source holding blocks [first, first+count) of a lead box."""
        # F4 headers count elements (two per byte); U8 headers count bytes.
        per_byte = 2 if self.packed_dtype == "F4" else 1
        if self.layout == "gpt-oss":
            return (*lead_off, first, 0), (*lead_shape, count, BLOCK_BYTES * per_byte)
        start = first * BLOCK_BYTES
        # compressed-tensors may end on a partial block when in % 32 != 0.
        size = min(count * BLOCK_BYTES, self.n_bytes - start)
        return (*lead_off, start * per_byte), (*lead_shape, size * per_byte)

    def scale_box(
        self, lead_off: tuple[int, ...], lead_shape: tuple[int, ...], first: int, count: int
    ) -> Box:
        """Box of the scale source for blocks [first, first+count) of a lead box."""
        return (*lead_off, first), (*lead_shape, count)


def n_blocks(n: int) -> int:
    """Blocks covering ``n`` elements (the last one may be partial)."""
    return -(-n // BLOCK)
