"""One GPTQ linear: its component keys and geometry (for the plan and the decoder).

Storage, for ``bits`` b, ``in`` input and ``out`` output features and groups of g:
``X.qweight`` I32 ``[in*b/32, out]`` (codes packed along in), ``X.qzeros`` I32
``[ceil(in/g), out*b/32]`` (packed along out), ``X.scales`` ``[ceil(in/g), out]``,
optional ``X.g_idx`` I32 ``[in]`` (the group of each input column; ``i // g``
unless act-order reordered them). The logical ``X.weight`` is ``[out, in]``:
``W[o, i] = scales[g_idx[i], o] * (q[i, o] - z[g_idx[i], o])``.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexq.formatkit import FLOAT_SCALE_DTYPES, QLinearKeys
from flexq_gptq.packing import Packing

COMPONENTS = ("qweight", "qzeros", "scales", "g_idx")
#: Scale dtypes the decoder reads, and the Paddle dtype each one implies.
SCALE_DTYPES = FLOAT_SCALE_DTYPES


@dataclass(frozen=True)
class GptqLinear(QLinearKeys):
    """Geometry of one GPTQ linear (its keys and shape from :class:`flexq.formatkit.QLinearKeys`).

    :ivar prefix: the module name (``model.layers.0.mlp.down_proj``).
    :ivar group_size: input columns per group (``in`` for group_size -1).
    :ivar zeros_minus_one: stored zeros are z - 1 (GPTQ v1).
    :ivar has_g_idx: ``X.g_idx`` is stored (else a column's group is ``i // g``).
    :ivar act_order: the config says ``desc_act: true`` and ``X.g_idx`` is stored:
        groups may be scattered over the columns.
    :ivar dtype: natural Paddle dtype of the logical weight.
    """

    prefix: str
    bits: int
    in_features: int
    out_features: int
    group_size: int
    zeros_minus_one: bool
    scale_dtype: str
    has_g_idx: bool
    act_order: bool
    dtype: str

    @property
    def packing(self) -> Packing:
        return Packing(self.bits)

    @property
    def n_groups(self) -> int:
        return -(-self.in_features // self.group_size)

    @property
    def g_idx(self) -> str:
        return f"{self.prefix}.g_idx"

    @property
    def sources(self) -> list[str]:
        keys = [self.qweight, self.qzeros, self.scales]
        return [*keys, self.g_idx] if self.has_g_idx else keys
