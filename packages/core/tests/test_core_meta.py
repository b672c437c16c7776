"""Meta-tests: every hookspec is tested and documented with its exact signature."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from flexq import spec

ROOT = Path(__file__).resolve().parents[3]
HOOKS = [name for name in dir(spec) if name.startswith("flexq_")]


def signature_text(name: str) -> str:
    sig = inspect.signature(getattr(spec, name))
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"def {name}({params}) -> {sig.return_annotation}"


def test_the_hooks_are_the_four_protocol_hooks_plus_recognized_keys_and_encode() -> None:
    assert set(HOOKS) == {
        "flexq_encode",
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
def test_hook_has_a_test(hook: str) -> None:
    """Some test module implements the hook in a plugin it exercises."""
    here = Path(__file__)
    tests = [p for p in (ROOT / "packages").glob("*/tests/test_*.py") if p != here]
    tests += list((ROOT / "tests").glob("test_*.py"))
    tests += list(here.parent.glob("conftest.py"))
    tests += list((ROOT / "tests" / "plugins").glob("*/src/*/*.py"))
    assert any(f"def {hook}(" in p.read_text() for p in tests)
