"""The advertised entry point resolves to the plugin and the format lists itself."""

from __future__ import annotations

from importlib.metadata import entry_points

import flexq
import flexq_gptq
import flexq_gptq.plugin


def test_entry_point_gptq_resolves_to_the_format_object() -> None:
    (ep,) = [e for e in entry_points(group="flexq") if e.name == "gptq"]
    assert ep.load() is flexq_gptq.plugin.plugin
    assert ep.dist is not None
    assert ep.dist.name == "flexq-format-gptq"


def test_list_formats_shows_version_and_one_line_description() -> None:
    (info,) = [i for i in flexq.list_formats() if i.name == "gptq"]
    assert info.error is None
    assert info.version == flexq_gptq.__version__ == "0.1.0"
    assert info.description.startswith("GPTQ (AutoGPTQ, GPTQModel, optimum, auto-round)")


def test_plugin_implements_every_hook() -> None:
    for hook in (
        "flexq_logical_metadata",
        "flexq_recognized_keys",
        "flexq_source_keys",
        "flexq_read_plan",
        "flexq_apply",
        "flexq_encode",
        "flexq_quant_methods",
    ):
        assert callable(getattr(flexq_gptq.plugin.plugin, hook))
        assert flexq.plugin.manager.registry.implements("gptq", hook)
    assert flexq_gptq.plugin.plugin.flexq_quant_methods() == (
        "gptq",
        "auto-round",
        "intel/auto-round",
    )
