"""The conformance suite every format runs (flexq.testing.FormatConformance)."""

from __future__ import annotations

import flexq_gptq.plugin
from flexq.testing import FormatConformance


class TestConformance(FormatConformance):
    format_name = "gptq"
    methods = ("gptq", "auto-round", "intel/auto-round")
    plugin = flexq_gptq.plugin.plugin
