"""What ``flexq_encode`` writes for the ct-int format, for ``flexq demo`` and the tests.

Its own module so that the entry point (:mod:`flexq_ct_int.plugin`) stays cheap to import.
"""

from __future__ import annotations

from functools import partial

from flexq.formatkit import Encoder
from flexq_ct_int.encode import WeightScheme, checkpoint_config, quantize_all

#: Smallest logits cosine similarity promised for a model loaded from the demo's
#: 4-bit, group-32 symmetric weights (15 levels per group, as AWQ's 0.95).
MIN_LOGITS_COSINE = 0.95
#: The scheme ``flexq_encode`` writes: 4-bit, group-32 symmetric pack-quantized.
DEMO_SCHEME = WeightScheme(bits=4, strategy="group", group_size=32)

encode = Encoder(
    partial(quantize_all, scheme=DEMO_SCHEME), checkpoint_config(DEMO_SCHEME), MIN_LOGITS_COSINE
)
