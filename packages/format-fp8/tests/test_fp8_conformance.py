"""The conformance suite every format runs (flexq.testing.FormatConformance)."""

from __future__ import annotations

import flexq_fp8.plugin
from flexq.testing import FormatConformance


class TestConformance(FormatConformance):
    format_name = "fp8"
    methods = (
        "fp8",
        "fbgemm_fp8",
        "compressed-tensors/float-quantized",
        "compressed-tensors/mxfp8-quantized",
        "modelopt",
        "auto-round",
    )
    plugin = flexq_fp8.plugin.plugin
