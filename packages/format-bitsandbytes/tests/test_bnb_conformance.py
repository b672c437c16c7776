"""The conformance suite every format runs (flexq.testing.FormatConformance)."""

from __future__ import annotations

import flexq_bitsandbytes.plugin
from flexq.testing import FormatConformance


class TestConformance(FormatConformance):
    format_name = "bitsandbytes"
    methods = ("bitsandbytes",)
    plugin = flexq_bitsandbytes.plugin.plugin
