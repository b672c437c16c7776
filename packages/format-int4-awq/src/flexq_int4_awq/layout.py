"""The geometry of one AutoAWQ INT4 linear: its three components and where each code sits.

Used by :mod:`flexq_int4_awq.detect` (which builds :class:`AwqLinear`),
:mod:`flexq_int4_awq.plan`, :mod:`flexq_int4_awq.decode` and the encoder.
The layouts (AutoAWQ ``awq/modules/linear/gemm.py`` and ``gemv.py``):

- GEMM: ``X.qweight`` I32 [in, out/8], ``X.qzeros`` I32 [in/g, out/8],
  ``X.scales`` F16 [in/g, out]; packed along out. Words interleave: nibble
  slot i (bits 4i..4i+3) of packed column c holds logical column
  ``c*8 + AWQ_ORDER[i]`` (AutoAWQ ``order_map``), so logical values [0..7]
  pack to 0x75316420.
- GEMV: ``X.qweight`` I32 [out, in/8], ``X.qzeros`` I32 [out, W],
  ``X.scales`` F16 [out, 8W]; packed along in, slot i holds element i; W is
  the padded group-column count of :func:`gemv_zeros_width`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flexq.formatkit import FLOAT_SCALE_DTYPES, QLinearKeys, ceil_div

if TYPE_CHECKING:
    from flexq_int4_awq.config import Version

PACK = 8  # 4-bit codes per int32
COMPONENTS = ("qweight", "qzeros", "scales")
#: safetensors dtype of the scales -> Paddle dtype name of the logical weight.
SCALE_DTYPES = FLOAT_SCALE_DTYPES
#: GEMM: logical element AWQ_ORDER[i] of a group of eight is stored in slot i.
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
#: GEMM: logical element j of a group of eight is read from slot AWQ_REVERSE[j].
AWQ_REVERSE = tuple(AWQ_ORDER.index(j) for j in range(8))
#: GEMV: element j is in slot j.
SEQUENTIAL = tuple(range(8))


def slots_for(version: str) -> tuple[int, ...]:
    """Slot of each logical element of a group of eight, for a layout version."""
    return AWQ_REVERSE if version == "gemm" else SEQUENTIAL


@dataclass(frozen=True)
class AwqLinear(QLinearKeys):
    """One quantized linear: the logical ``X.weight`` [out, in] and its three components
    (their keys and the shape from :class:`flexq.formatkit.QLinearKeys`).

    :ivar group_size: resolved group size (never -1).
    :ivar scale_dtype: safetensors dtype of ``X.scales``.
    """

    prefix: str
    version: Version
    out_features: int
    in_features: int
    group_size: int
    scale_dtype: str

    @property
    def dtype(self) -> str:
        """The logical weight's natural dtype: the scales' (AutoAWQ keeps them in the
        model's dtype)."""
        return SCALE_DTYPES[self.scale_dtype]

    @property
    def sources(self) -> tuple[str, str, str]:
        return self.qweight, self.qzeros, self.scales

    @property
    def n_groups(self) -> int:
        return self.in_features // self.group_size


def gemv_zeros_width(n_groups: int, group_size: int) -> int | None:
    """Packed columns of a GEMV ``qzeros`` (AutoAWQ ``calculate_zeros_width``).

    Group columns are packed 8 per int32 and the count is rounded up to a
    multiple of 1 (g >= 128), 2 (g = 64) or 4 (g = 32) for the kernel's
    vector loads. None for a group size AutoAWQ's GEMV does not support.
    """
    multiple = 1 if group_size >= 128 else {64: 2, 32: 4}.get(group_size)
    if multiple is None:
        return None
    return ceil_div(ceil_div(n_groups, PACK), multiple) * multiple
