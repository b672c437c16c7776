"""The core's hand-kept tables of formats, tied to what the installed formats declare.

A new format package's methods reach ``plugin/known.py``'s PUBLISHED through the
generated ``plugin/published.py`` (``python -m flexq.cli.doc_blocks .``; so a checkpoint
of its method names the distribution to install when it is missing), and so do the
tensor names of its checkpoints that the pass-through guard's own rules miss
(``published.COMPANIONS``: so its checkpoint is refused, not passed through, when it is
missing). These tests fail when the tables and the formats disagree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import flexq
from flexq.plugin.known import FIRST_PARTY, PUBLISHED
from flexq.plugin.passthrough import looks_quantized
from flexq.plugin.spec import API_ATTRIBUTE, API_VERSION

if TYPE_CHECKING:
    from .conftest import CountedPlans


def first_party_rows() -> list[flexq.plugin.manager.FormatInfo]:
    return [
        row
        for row in flexq.list_formats()
        if row.distribution in FIRST_PARTY and row.source == "entry point"
    ]


def test_the_published_methods_table_is_what_the_installed_formats_claim() -> None:
    """known.PUBLISHED names, for every config method, exactly the first-party formats
    whose ``methods`` claim it: no method missing, none stale, no distribution wrong."""
    claimed: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for row in first_party_rows():
        assert row.error is None, row.error
        for method in row.methods:
            claimed[method].add((row.name, row.distribution))
    published = {method: set(pairs) for method, pairs in PUBLISHED.items()}
    assert published == dict(claimed)


def test_every_published_distribution_is_installed_in_the_workspace() -> None:
    """A distribution the table names exists (its format loads from an entry point),
    and every installed format that claims config methods is in the table (a container
    format such as GGUF names no ``quant_method``, so it has no row)."""
    installed = {row.distribution for row in first_party_rows() if row.methods}
    named = {dist for pairs in PUBLISHED.values() for _, dist in pairs}
    assert named == installed


def published_encoders() -> list[str]:
    """The first-party formats that write checkpoints (the guide's example is not one)."""
    registry = flexq.plugin.manager.registry
    return [row.name for row in first_party_rows() if registry.implements(row.name, "flexq_encode")]


@pytest.mark.parametrize("format_ckpt", published_encoders(), indirect=True)
def test_a_formats_checkpoint_looks_quantized_to_the_core_without_the_format(
    format_ckpt: tuple[str, Path],
) -> None:
    """Every logical tensor a first-party format builds has a source the pass-through
    guard (``looks_quantized``: QUANT_COMPANIONS, the generated COMPANIONS, integer
    weights, quant states) refuses, so with the format uninstalled its checkpoint is an
    error, never passed through."""
    name, path = format_ckpt
    registry = flexq.plugin.manager.registry
    checkpoint = flexq.Checkpoint(path)
    logical = registry.logical_metadata(name, checkpoint)
    assert logical
    unguarded = [
        key
        for key in logical
        if not any(
            looks_quantized(source, checkpoint.info(source))
            for source in registry.source_keys(name, checkpoint, key)
        )
    ]
    assert unguarded == [], (
        f"{name}: {unguarded} would pass through without the format: "
        "run `python -m flexq.cli.doc_blocks .` from the repository root"
    )


def test_every_first_party_format_declares_this_kit_api_version() -> None:
    """flexq's own formats are built with this kit, and say so."""
    manager = flexq.plugin.manager.registry.manager
    declared = {
        row.name: getattr(manager.get_plugin(row.name), API_ATTRIBUTE, None)
        for row in first_party_rows()
    }
    assert declared == dict.fromkeys(declared, API_VERSION)


def test_a_forced_global_plan_asks_the_formats_plan_once(counted_plans: CountedPlans) -> None:
    """``force_global`` (the whole-source path) calls a Format's read-plan hook once and
    its plan once, for the whole tensor, and still carries the scales that plan declares
    (it was two hook calls: None for the forced one, then the whole tensor's plan)."""
    hook_calls: list[bool] = []

    def before(hook_name: str, impls: Any, kwargs: Mapping[str, Any]) -> None:
        if hook_name == "flexq_read_plan":
            hook_calls.append(kwargs["force_global"])

    undo = flexq.plugin.manager.registry.manager.add_hookcall_monitoring(before, lambda *args: None)
    try:
        ct = flexq.compose(counted_plans.path, [counted_plans.name])
        box = flexq.TargetSlice((8, 8), (4, 8), (4, 0), "float32")
        plan = ct.plan("lin.weight", box, force_global=True)
    finally:
        undo()
    assert hook_calls == [True]  # one hook call ...
    # ... one plan, of the whole
    assert counted_plans.asked == [flexq.TargetSlice.whole((8, 8), "float32")]
    assert plan.mode == "global"
    assert plan.scales == ("lin.weight_qscale",)
    assert dict(plan.source_slices) == {
        "lin.weight_q": ((0, 0), (8, 8)),
        "lin.weight_qscale": ((0,), (8,)),
    }


def test_a_format_packages_interop_pins_and_rows_live_in_its_own_directory() -> None:
    """A package that names interop producers in its pyproject carries their rows in its
    ``interop/*_schemes.py`` (and the other way round); the root lists neither: the
    noxfile and interop/schemes.py collect them by glob."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    for pyproject in sorted(root.glob("packages/*/pyproject.toml")):
        table = tomllib.loads(pyproject.read_text()).get("tool", {}).get("flexq", {})
        pins = table.get("interop", {}).get("producers", [])
        rows = sorted(pyproject.parent.glob("interop/*_schemes.py"))
        assert bool(pins) == bool(rows), pyproject.parent
        for path in rows:
            assert "\nSCHEMES = (" in path.read_text(), path
        for pin in pins:
            assert pin not in (root / "noxfile.py").read_text(), f"{pin} also in noxfile.py"
            name = pin.split("=")[0]
            assert name not in (root / "pyproject.toml").read_text(), name
    quark = tomllib.loads((root / "packages/format-quark/pyproject.toml").read_text())
    assert quark["tool"]["flexq"]["interop"]["producers"] == ["amd-quark==0.13"]
