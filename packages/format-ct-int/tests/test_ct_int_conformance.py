"""The conformance suite every format runs (flexq.testing.FormatConformance)."""

from __future__ import annotations

import flexq_ct_int.plugin
from flexq.testing import FormatConformance


class TestConformance(FormatConformance):
    format_name = "ct-int"
    methods = ("compressed-tensors/pack-quantized", "compressed-tensors/int-quantized")
    plugin = flexq_ct_int.plugin.plugin
