"""The format registry: runtime registration, validation of hookimpls, listing."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
import pytest

import flexq
from flexq.errors import PluginError

if TYPE_CHECKING:
    from pathlib import Path


def test_register_format_makes_compose_use_it_and_unregister_removes_it(
    scaled_ckpt: Path,
) -> None:
    from .conftest import ScaledFormat

    name = flexq.register_format(ScaledFormat())
    try:
        assert name == "scaled"
        row = next(r for r in flexq.list_formats() if r.name == "scaled")
        assert (row.version, row.source, row.distribution) == ("9.9", "runtime", "")
        assert row.description.startswith("An inline format")
        ct = flexq.compose(scaled_ckpt, formats=["scaled"])
        assert ct.entries["a"].owner == "scaled"
        np.testing.assert_array_equal(
            ct.load("a", "float32"), np.arange(-6, 6, dtype=np.float32).reshape(3, 4) * 0.5
        )
    finally:
        flexq.unregister_format("scaled")
    assert "scaled" not in {r.name for r in flexq.list_formats()}
    plain = flexq.compose(scaled_ckpt)
    assert plain.entries["a.q"].is_passthrough
    assert "a" not in plain.entries


def test_duplicate_names_are_an_error(scaled_format: object) -> None:
    from .conftest import ScaledFormat

    with pytest.raises(PluginError, match="already registered"):
        flexq.register_format(ScaledFormat())


def test_misspelled_hookimpl_fails_at_registration() -> None:
    class Typo:
        @flexq.hookimpl
        def flexq_logical_metadat(self, checkpoint: object) -> None:
            return None

    with pytest.raises(PluginError, match="typo.*flexq_logical_metadat"):
        flexq.register_format(Typo(), name="typo")
    assert "typo" not in {r.name for r in flexq.list_formats()}


def test_a_marked_name_without_the_prefix_is_still_a_hookimpl() -> None:
    # The registry's plugin manager skips only dunders (issue 30's discovery cost):
    # a hook named through ``specname`` is found, a marked stray name still refused.
    class Named:
        @flexq.hookimpl(specname="flexq_quant_methods")
        def methods_of(self) -> list[str]:
            return ["named-method"]

    class Stray:
        @flexq.hookimpl
        def quant_methods(self) -> list[str]:
            return []

    flexq.register_format(Named(), name="named")
    try:
        row = next(r for r in flexq.list_formats() if r.name == "named")
        assert row.methods == ("named-method",)
    finally:
        flexq.unregister_format("named")
    with pytest.raises(PluginError, match="stray.*quant_methods"):
        flexq.register_format(Stray(), name="stray")


def test_hookimpl_with_an_unknown_argument_fails_at_registration() -> None:
    class BadArgs:
        @flexq.hookimpl
        def flexq_source_keys(self, logical_key: str, colour: str) -> list[str]:
            return []

    with pytest.raises(PluginError, match="badargs"):
        flexq.register_format(BadArgs(), name="badargs")


def test_unknown_names_are_errors() -> None:
    with pytest.raises(PluginError, match="no format named"):
        flexq.unregister_format("never-registered")
    with pytest.raises(PluginError, match="not installed"):
        flexq.compose(".", formats=["never-registered"])
    with pytest.raises(PluginError, match="cannot tell the name"):
        flexq.register_format(SimpleNamespace())


def test_registering_a_format_with_wrong_typed_quant_methods_fails_and_leaves_no_row() -> None:
    class NotIterable:
        @flexq.hookimpl
        def flexq_quant_methods(self) -> int:
            return 42

    with pytest.raises(PluginError, match=r"'notiter': flexq_quant_methods returned 42 \(int\)"):
        flexq.register_format(NotIterable(), name="notiter")
    assert "notiter" not in {r.name for r in flexq.list_formats()}
    # The name is free again: a fixed plugin registers under it.
    assert flexq.register_format(SimpleNamespace(__name__="notiter")) == "notiter"
    flexq.unregister_format("notiter")
