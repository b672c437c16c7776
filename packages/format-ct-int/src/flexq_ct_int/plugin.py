"""compressed-tensors integer weights: pack-quantized (W4A16, W8A16) and int-quantized (W8A8).

The ``ct-int`` format as one :class:`flexq.formatkit.Format` (entry point
``ct-int = "flexq_ct_int.plugin:plugin"`` in the group ``flexq``). Each
``X.weight_packed`` (or I8 ``X.weight``) with its scale, zero point,
``weight_shape`` and ``g_idx`` becomes the logical ``X.weight`` ``[out, in]``.
Detection lives in :mod:`flexq_ct_int.detect`, plans in :mod:`flexq_ct_int.plan`,
the math in :mod:`flexq_ct_int.decode`.

The entry point imports only this module and :mod:`flexq_ct_int.identity`: the parts are
``"module:attribute"`` references, imported when a checkpoint of the format is
composed (:class:`flexq.formatkit.Format`); ``flexq_encode`` is :mod:`flexq_ct_int.demo`'s.
"""

from __future__ import annotations

from typing import Any

from flexq.formatkit.format import Format
from flexq.formatkit.lazy import exports
from flexq_ct_int.identity import FORMAT_NAME, FORMATS, QUANT_METHOD

__all__ = ["FORMAT_NAME", "plugin"]

plugin: Format[Any] = Format(
    FORMAT_NAME,
    "compressed-tensors integer weights: pack-quantized (W4A16, W8A16) and int-quantized (W8A8).",
    methods=tuple(f"{QUANT_METHOD}/{fmt}" for fmt in FORMATS),
    analyze="flexq_ct_int.detect:analyze",
    plan="flexq_ct_int.plan:local_plan",
    decode="flexq_ct_int.decode:decode",
    encode="flexq_ct_int.demo:encode",
    api_version="1.2",
)

__getattr__ = exports(
    __name__, {"MIN_LOGITS_COSINE": "flexq_ct_int.demo", "DEMO_SCHEME": "flexq_ct_int.demo"}
)
