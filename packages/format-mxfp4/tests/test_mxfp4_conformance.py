"""The conformance suite every format runs (flexq.testing.FormatConformance)."""

from __future__ import annotations

import flexq_mxfp4.plugin
from flexq.testing import FormatConformance


class TestConformance(FormatConformance):
    format_name = "mxfp4"
    methods = ("mxfp4", "compressed-tensors/mxfp4-pack-quantized")
    plugin = flexq_mxfp4.plugin.plugin
