"""Where the bytes of one MXFP4 logical tensor live, for the detector, the planner and decode.

Two producers store MXFP4 (32 E2M1 elements along the last stored axis share
one E8M0 scale byte), with different names and shapes:

- gpt-oss / Hugging Face experts: ``P_blocks`` [E, out, G, 16] + ``P_scales``
  [E, out, G] make ``P`` [E, in, out] with in = G*32: the stored rows are the
  output features, and the logical tensor is the producer's own dequantized twin
  (transformers' ``convert_moe_packed_tensors`` decodes [E, out, in] and
  transposes the last two axes; the HF bf16 checkpoint and PaddleFormers hold
  [E, in, out]). Any other lead works alike ([..., out, G, 16] -> [..., in, out]);
  a lone ``[G, 16]`` is a vector [G*32];
- compressed-tensors ``mxfp4-pack-quantized``: ``X.weight_packed`` [..., in/2]
  + ``X.weight_scale`` [..., ceil(in/32)] make ``X.weight`` [..., in]
  (nn.Linear's [out, in]), as stored.

Packed values are ``U8`` (or ``F4``, whose header counts elements, so its last
dimension is twice the byte count); scales are ``U8`` or ``F8_E8M0``.
:class:`MxTensor` hides those differences behind boxes of the *stored*
orientation ``[..., rows, n]`` (n elements along the blocked axis) and maps
logical boxes onto them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from flexq.formatkit import block_cover, ceil_div

if TYPE_CHECKING:
    from flexq.plan import Box

#: elements sharing one scale (OCP MX v1.0).
BLOCK = 32
#: bytes holding one block of E2M1 codes.
BLOCK_BYTES = BLOCK // 2

Layout = Literal["gpt-oss", "compressed-tensors"]

#: What each layout appends to the logical key: (packed codes, scales).
SUFFIXES: dict[Layout, tuple[str, str]] = {
    "gpt-oss": ("_blocks", "_scales"),
    "compressed-tensors": ("_packed", "_scale"),
}
PACKED_DTYPES = ("U8", "F4")
SCALE_DTYPES = ("U8", "F8_E8M0")


@dataclass(frozen=True)
class MxTensor:
    """One MXFP4 logical tensor and its two physical components.

    :ivar stored: the decoded shape in storage orientation, ``[..., n]``: the
        scales' lead dims, then the elements of the blocked axis.
    :ivar packed_dtype: safetensors dtype of ``packed_key`` (``U8`` or ``F4``).
    """

    key: str
    layout: Layout
    packed_key: str
    scale_key: str
    stored: tuple[int, ...]
    packed_dtype: str

    @property
    def transposed(self) -> bool:
        """Whether the logical tensor swaps the stored last two axes (gpt-oss experts)."""
        return self.layout == "gpt-oss" and len(self.stored) >= 2

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape: ``[..., in, out]`` for gpt-oss experts, else ``stored``."""
        return self.to_stored(self.stored)

    @property
    def n(self) -> int:
        """Elements along the blocked axis."""
        return self.stored[-1]

    @property
    def n_bytes(self) -> int:
        """Bytes of packed codes along the blocked axis."""
        return self.n // 2

    def to_stored(self, dims: Sequence[int]) -> tuple[int, ...]:
        """Logical dims (an offset or a shape) in storage order, or back: the same swap."""
        dims = tuple(dims)
        return (*dims[:-2], dims[-1], dims[-2]) if self.transposed else dims

    def covering_blocks(self, offset: int, size: int) -> tuple[int, int]:
        """(first block, block count) covering ``size`` elements of the blocked axis from
        ``offset``."""
        return block_cover(offset, size, BLOCK, self.n)

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
    return ceil_div(n, BLOCK)
