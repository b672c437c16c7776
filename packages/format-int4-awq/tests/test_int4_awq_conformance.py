"""The conformance suite every format runs (flexq.testing.FormatConformance)."""

from __future__ import annotations

import flexq_int4_awq.plugin
from flexq.testing import FormatConformance


class TestConformance(FormatConformance):
    format_name = "int4-awq"
    methods = ("awq",)
    plugin = flexq_int4_awq.plugin.plugin
