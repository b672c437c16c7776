"""The advertised entry point resolves to the plugin and the format lists itself."""

from __future__ import annotations

from importlib.metadata import entry_points

import flexq
import flexq_int4_awq
import flexq_int4_awq.plugin


def test_entry_point_int4_awq_resolves_to_the_plugin_object() -> None:
    (ep,) = [e for e in entry_points(group="flexq") if e.name == "int4-awq"]
    assert ep.load() is flexq_int4_awq.plugin.plugin
    assert ep.dist is not None
    assert ep.dist.name == "flexq-format-int4-awq"


def test_list_formats_shows_version_and_one_line_description() -> None:
    (info,) = [i for i in flexq.list_formats() if i.name == "int4-awq"]
    assert info.error is None
    assert info.version == flexq_int4_awq.__version__ == "0.1.0"
    assert info.description.startswith("AutoAWQ INT4 (GEMM and GEMV layouts)")


def test_plugin_implements_every_hook() -> None:
    for hook in (
        "flexq_logical_metadata",
        "flexq_recognized_keys",
        "flexq_source_keys",
        "flexq_read_plan",
        "flexq_apply",
    ):
        assert callable(getattr(flexq_int4_awq.plugin.plugin, hook))
        assert flexq.plugin.manager.registry.implements("int4-awq", hook)
