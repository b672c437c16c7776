"""compressed-tensors integer weights: pack-quantized (W4A16, W8A16) and int-quantized (W8A8).

The ``ct-int`` format as one :class:`flexq.formatkit.Format` (entry point
``ct-int = "flexq_ct_int.plugin:plugin"`` in the group ``flexq``). Each
``X.weight_packed`` (or I8 ``X.weight``) with its scale, zero point,
``weight_shape`` and ``g_idx`` becomes the logical ``X.weight`` ``[out, in]``.
Detection lives in :mod:`flexq_ct_int.detect`, plans in :mod:`flexq_ct_int.plan`,
the math in :mod:`flexq_ct_int.decode`.
"""

from __future__ import annotations

from functools import partial

from flexq.formatkit import Encoder, Format
from flexq_ct_int.config import FORMAT_NAME, FORMATS, QUANT_METHOD
from flexq_ct_int.decode import dequantize
from flexq_ct_int.detect import analyze
from flexq_ct_int.encode import WeightScheme, checkpoint_config, quantize_all
from flexq_ct_int.plan import local_plan

__all__ = ["FORMAT_NAME", "MIN_LOGITS_COSINE", "plugin"]

#: Smallest logits cosine similarity promised for a model loaded from the demo's
#: 4-bit, group-32 symmetric weights (15 levels per group, as AWQ's 0.95).
MIN_LOGITS_COSINE = 0.95
#: The scheme ``flexq_encode`` writes: 4-bit, group-32 symmetric pack-quantized.
DEMO_SCHEME = WeightScheme(bits=4, strategy="group", group_size=32)

plugin = Format(
    FORMAT_NAME,
    "compressed-tensors integer weights: pack-quantized (W4A16, W8A16) and int-quantized (W8A8).",
    methods=tuple(f"{QUANT_METHOD}/{fmt}" for fmt in FORMATS),
    analyze=analyze,
    plan=local_plan,
    decode=dequantize,
    encode=Encoder(
        partial(quantize_all, scheme=DEMO_SCHEME), checkpoint_config(DEMO_SCHEME), MIN_LOGITS_COSINE
    ),
    api_version="1.0",
)
