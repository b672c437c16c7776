"""The distribution advertises the ``fp8`` format correctly (no typo in the entry point)."""

from __future__ import annotations

from importlib.metadata import entry_points, version

import flexq
import flexq_fp8
from flexq_fp8.plugin import plugin


def test_entry_point_fp8_resolves_to_the_plugin_object() -> None:
    (ep,) = [e for e in entry_points(group="flexq") if e.name == "fp8"]
    assert ep.value == "flexq_fp8.plugin:plugin"
    assert ep.load() is plugin
    assert ep.dist is not None
    assert ep.dist.name == "flexq-format-fp8"


def test_list_formats_shows_fp8_with_version_and_one_line_description() -> None:
    (info,) = [i for i in flexq.list_formats() if i.name == "fp8"]
    assert info.error is None
    assert info.distribution == "flexq-format-fp8"
    assert info.version == version("flexq-format-fp8") == flexq_fp8.__version__
    assert info.description == (plugin.__doc__ or "").strip().splitlines()[0]
    assert "FP8 E4M3" in info.description


def test_registry_routes_every_hook_to_the_fp8_plugin() -> None:
    from flexq.plugin.manager import registry

    for hook in (
        "flexq_logical_metadata",
        "flexq_recognized_keys",
        "flexq_source_keys",
        "flexq_read_plan",
        "flexq_apply",
    ):
        assert registry.implements("fp8", hook), hook
