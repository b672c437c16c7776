"""The conformance suite every format runs (flexq.testing.FormatConformance)."""

from __future__ import annotations

import flexq_nvfp4.plugin
from flexq.testing import FormatConformance


class TestConformance(FormatConformance):
    format_name = "nvfp4"
    methods = ("compressed-tensors/nvfp4-pack-quantized", "modelopt", "auto-round")
    plugin = flexq_nvfp4.plugin.plugin
