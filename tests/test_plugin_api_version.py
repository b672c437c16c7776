"""The kit API version: an installed plugin built for another major version of
``flexq.formatkit.API_VERSION`` is disabled with ONE warning naming it, its distribution
and both versions; one built for the same major version (any minor) loads and works.

The plugins are out-of-tree distributions installed the way
tests/test_reliability_plugins.py installs its faulty one: a module and a ``.dist-info``
with an ``entry_points.txt`` on a directory put first on ``sys.path``, and a fresh
discovery of the registry.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq.errors import PluginError, PluginWarning
from flexq.formatkit import API_VERSION, Format
from flexq.plugin.manager import registry

from .reliability import surgery
from .test_reliability import _dist, make_targets
from .test_reliability_plugins import reference

#: A do-nothing format that claims no tensor; ``{declared}`` is its ``api_version``.
PLUGIN_SRC = """
from flexq.formatkit import Format

plugin = Format(
    "{name}", "a format built for kit API {declared}", methods=("{name}",),
    analyze=lambda checkpoint: None, plan=lambda layout, target: None,
    decode=lambda layout, sources, out: out, api_version={declared!r},
)
"""


def install(site: Path, name: str, declared: str) -> str:
    """An installed-looking distribution ``flexq-format-<name>`` of format ``name``."""
    module = f"flexq_{name}"
    (site / f"{module}.py").write_text(PLUGIN_SRC.format(name=name, declared=declared))
    dist = f"flexq-format-{name}"
    _dist(site, dist, f"{name} = {module}:plugin")
    return dist


@pytest.fixture
def fresh_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site directory first on sys.path and a registry that discovers again."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_pm", None)
    monkeypatch.setattr(registry, "_infos", {})
    monkeypatch.setattr(registry, "_warned", set())
    return site


def discover() -> tuple[dict[str, flexq.plugin.manager.FormatInfo], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = {r.name: r for r in flexq.list_formats()}
    return rows, [str(w.message) for w in caught if w.category is PluginWarning]


def test_a_plugin_built_for_another_major_version_is_disabled_with_one_warning(
    fresh_discovery: Path, tmp_path: Path
) -> None:
    dist = install(fresh_discovery, "future", "2.0")
    rows, warned = discover()
    assert len(warned) == 1, warned
    for part in ("'future'", dist, "2.0", API_VERSION, "disabled"):
        assert part in warned[0], (part, warned[0])
    assert rows["future"].error == warned[0]
    assert registry.disabled("future")
    assert "future" not in registry.active()
    # The other formats keep working, and a load warns no second time.
    assert rows["fp8"].error is None
    ckpt = surgery.fp8(tmp_path / "ckpt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        targets = make_targets(ckpt)
        flexq.load_state_dict(targets, ckpt)
    assert [w for w in caught if w.category is PluginWarning] == []
    for key, want in reference(ckpt).items():
        np.testing.assert_array_equal(targets[key].astype("float32").numpy(), want)


def test_a_plugin_built_for_a_newer_minor_version_of_the_same_major_loads(
    fresh_discovery: Path,
) -> None:
    major = API_VERSION.split(".")[0]
    install(fresh_discovery, "minor", f"{major}.99")
    rows, warned = discover()
    assert warned == []
    assert rows["minor"].error is None
    assert rows["minor"].methods == ("minor",)
    assert "minor" in registry.active()


def test_a_version_that_is_not_major_minor_disables_the_plugin_naming_it(
    fresh_discovery: Path,
) -> None:
    install(fresh_discovery, "sloppy", "one")
    rows, warned = discover()
    assert len(warned) == 1, warned
    assert "'sloppy'" in warned[0]
    assert "'one'" in warned[0]
    assert "'major.minor'" in warned[0]
    assert rows["sloppy"].error == warned[0]


def test_registering_a_format_built_for_another_major_version_is_refused() -> None:
    plugin: Format[Any] = Format(
        "future-runtime",
        "a format from the future",
        methods=("future-runtime",),
        analyze=lambda checkpoint: None,
        plan=lambda layout, target: None,
        decode=lambda layout, sources, out: out,
        api_version="2.0",
    )
    with pytest.raises(PluginError) as caught:
        flexq.register_format(plugin)
    assert "'future-runtime'" in str(caught.value)
    assert "2.0" in str(caught.value)
    assert API_VERSION in str(caught.value)
    assert all(r.name != "future-runtime" for r in flexq.list_formats())
