"""The core's layering, read from its own import statements: the authors' kit
(:mod:`flexq.formatkit`) is the top layer, so no other core module imports it, and the
shared numerics (:mod:`flexq.numerics`) stand below the plugin layer and the load path.

Every import counts, those under ``TYPE_CHECKING`` and inside functions too: a layer
that only type-checks against the one above still stands on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import flexq

SRC = Path(flexq.__file__).resolve().parent
#: What the shared numerics may import of flexq: the layers below them.
BELOW_NUMERICS = ("flexq.errors", "flexq.io", "flexq.plan", "flexq.numerics")
#: What the config models may import of flexq (the core's detection reads them).
BELOW_QUANTCONFIG = ("flexq.errors", "flexq.io", "flexq.quantconfig")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, here: str | None = None) -> set[str]:
    """Every module ``path`` (the module ``here``) imports, absolute (``from . import x``
    resolved)."""
    here = here or module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            # ``from flexq import formatkit`` imports the submodule, not a name.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def core_modules(exclude: str) -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py")) if not module_name(p).startswith(exclude)]


def imports_under(modules: set[str], prefix: str) -> list[str]:
    return sorted(m for m in modules if m == prefix or m.startswith(prefix + "."))


def test_the_import_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The walker itself: plain, from, relative, TYPE_CHECKING and in-function imports."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..formatkit import bands\n"
        "if TYPE_CHECKING:\n    from flexq.formatkit.format import BoxSources\n"
        "def f() -> None:\n    import flexq.formatkit.words\n"
    )
    found = imports_under(imported_modules(probe, "flexq.load.probe"), "flexq.formatkit")
    assert found == [
        "flexq.formatkit",
        "flexq.formatkit.bands",
        "flexq.formatkit.format",
        "flexq.formatkit.format.BoxSources",
        "flexq.formatkit.words",
    ]


@pytest.mark.parametrize("path", core_modules("flexq.formatkit"), ids=module_name)
def test_no_core_module_imports_the_format_kit(path: Path) -> None:
    assert imports_under(imported_modules(path), "flexq.formatkit") == []


@pytest.mark.parametrize("path", sorted((SRC / "numerics").glob("*.py")), ids=module_name)
def test_the_numerics_import_only_the_layers_below_them(path: Path) -> None:
    flexq_imports = [m for m in imported_modules(path) if m.split(".")[0] == "flexq"]
    above = [m for m in flexq_imports if not m.startswith(BELOW_NUMERICS)]
    assert above == []


@pytest.mark.parametrize("path", sorted((SRC / "quantconfig").glob("*.py")), ids=module_name)
def test_the_config_models_import_only_the_layers_below_them(path: Path) -> None:
    flexq_imports = [m for m in imported_modules(path) if m.split(".")[0] == "flexq"]
    assert [m for m in flexq_imports if not m.startswith(BELOW_QUANTCONFIG)] == []


@pytest.mark.parametrize(("old", "new"), [("config", "base"), ("ignore", "ignore")])
def test_the_old_kit_config_paths_are_the_moved_modules(old: str, new: str) -> None:
    import importlib

    moved = importlib.import_module(f"flexq.quantconfig.{new}")
    assert importlib.import_module(f"flexq.formatkit.{old}") is moved


@pytest.mark.parametrize(
    "name", ["arrays", "bands", "elements", "ops", "rounding", "scales", "threads", "words"]
)
def test_the_old_kit_module_paths_are_the_moved_modules(name: str) -> None:
    """Code written against ``flexq.formatkit.<module>`` keeps working with the same
    module object: its names, and a monkeypatch of a module constant, reach the code."""
    import importlib

    old = importlib.import_module(f"flexq.formatkit.{name}")
    assert old is importlib.import_module(f"flexq.numerics.{name}")


def test_sources_keeps_its_kit_path() -> None:
    from flexq.formatkit import BoxSources as from_kit
    from flexq.formatkit.format import BoxSources as from_format
    from flexq.numerics.sources import BoxSources

    assert from_kit is from_format is BoxSources


def test_the_composition_holds_no_paddle_protocol_state(tmp_path: Path) -> None:
    """``compose`` returns the LoadTransform (``ComposedTransform``) holding an immutable
    :class:`Composition`: planning, checking and decoding through the composition leave
    nothing behind, and the protocol's calls change only the adapter (``read_plan``
    remembers a plan for Paddle's next ``apply``)."""
    import numpy as np
    import paddle

    from flexq.composition import Composition

    path = flexq.save_checkpoint(
        tmp_path / "c", {"norm": flexq.RawTensor.of(np.arange(4, dtype=np.float32))}
    )
    ct = flexq.compose(path)
    comp = ct.composition
    assert isinstance(comp, Composition)
    assert not isinstance(ct, Composition)
    protocol = {"logical_metadata", "source_keys", "read_plan", "read_plan_for", "apply"}
    assert not protocol & set(dir(Composition))
    state = dict(vars(comp))
    np.testing.assert_array_equal(comp.load("norm", "float32"), np.arange(4, dtype=np.float32))
    plan = ct.read_plan("norm", flexq.TargetSlice((4,), (2,), (1,), "float32"))
    out = ct.apply("norm", ct.read_sources(plan), paddle.float32)
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0])
    assert ct.read_plan_for("norm") is plan
    assert ct.current == "norm"
    assert vars(comp) == state
