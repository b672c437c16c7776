"""Meta-tests: every hookspec has a test of its own and is documented with its exact signature;
every name of the format-author kit is documented in the plugin guide."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from flexq.plugin import spec

ROOT = Path(__file__).resolve().parents[3]
HOOKS = [name for name in dir(spec) if name.startswith("flexq_")]


def signature_text(name: str) -> str:
    sig = inspect.signature(getattr(spec, name))
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"def {name}({params}) -> {sig.return_annotation}"


def test_the_hooks_are_the_four_protocol_hooks_plus_methods_recognized_keys_encode_and_open() -> (
    None
):
    assert set(HOOKS) == {
        "flexq_quant_methods",
        "flexq_encode",
        "flexq_open_checkpoint",
        "flexq_logical_metadata",
        "flexq_recognized_keys",
        "flexq_source_keys",
        "flexq_read_plan",
        "flexq_apply",
    }


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_documented_with_its_exact_signature(hook: str) -> None:
    docs = (ROOT / "docs" / "hookspecs.md").read_text()
    assert signature_text(hook) in docs


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_a_test_of_its_own(hook: str) -> None:
    """As datasette does: a test named ``test_hook_<name>`` exists for every hook, so a
    new hook without its own test fails here (a plugin merely implementing it does not count)."""
    short = hook.removeprefix("flexq_")
    tests = [*(ROOT / "packages").glob("*/tests/test_*.py"), *(ROOT / "tests").glob("test_*.py")]
    assert any(f"def test_hook_{short}" in p.read_text() for p in tests), hook


def test_every_kit_name_is_documented_in_the_plugin_guide() -> None:
    import flexq.formatkit

    guide = (ROOT / "docs" / "plugin-guide.md").read_text()
    missing = [name for name in flexq.formatkit.__all__ if f"`{name}" not in guide]
    assert not missing, missing
