"""The rule of the kit API version (``flexq.plugin.checks.api_version_problem``): a plugin
runs when it declares the same major version as this flexq's kit, or none at all."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from flexq.formatkit import API_VERSION
from flexq.plugin.checks import api_version_problem
from flexq.plugin.spec import API_ATTRIBUTE


def plugin_declaring(version: object) -> object:
    return SimpleNamespace(**{API_ATTRIBUTE: version})


def test_the_kit_version_is_major_dot_minor() -> None:
    major, minor = API_VERSION.split(".")
    assert major.isdigit()
    assert minor.isdigit()


@pytest.mark.parametrize("declared", ["1.0", "1.7", "1.12", None])
def test_the_same_major_version_or_none_declared_runs(declared: str | None) -> None:
    assert api_version_problem(plugin_declaring(declared), "1.3") is None
    assert api_version_problem(object(), "1.3") is None  # no attribute at all


@pytest.mark.parametrize(("declared", "current"), [("2.0", "1.3"), ("1.0", "2.1"), (None, "2.0")])
def test_another_major_version_names_both_versions(declared: str | None, current: str) -> None:
    problem = api_version_problem(plugin_declaring(declared), current)
    assert problem is not None
    assert current in problem
    assert (declared or "1.x (none declared)") in problem


@pytest.mark.parametrize("declared", ["1", "one", "1.0.2", " 1.0", 1.0])
def test_a_version_that_is_not_major_minor_is_named(declared: object) -> None:
    problem = api_version_problem(plugin_declaring(declared), "1.0")
    assert problem is not None
    assert repr(declared) in problem
    assert "'major.minor'" in problem
