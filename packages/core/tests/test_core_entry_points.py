"""Discovery reads the ``flexq`` group's entry points as ``importlib.metadata`` does.

:func:`flexq.plugin.discovery.group_entry_points` parses only the distributions whose
``entry_points.txt`` names the group (issue 30: parsing every installed distribution
was most of reading them); the standard ``entry_points(group=...)`` is the oracle,
over this environment and over distributions made to test the edges: a shadowed
second copy of a distribution, a header written with spaces (not the group, for
importlib.metadata either), ``flexq`` named only in another group.
"""

from __future__ import annotations

from importlib.metadata import EntryPoints, entry_points
from typing import TYPE_CHECKING

from flexq.plugin.discovery import group_entry_points

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def rows(eps: EntryPoints) -> list[tuple[str, str, str, str]]:
    """Each entry point as (name, value, group, distribution), in order."""
    return [(e.name, e.value, e.group, e.dist.name if e.dist else "?") for e in eps]


def dist(site: Path, name: str, version: str, entry_points_txt: str) -> None:
    """A distribution ``name`` ``version`` in directory ``site`` with that entry_points.txt."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points_txt)


def test_the_installed_formats_are_read_as_importlib_reads_them() -> None:
    ours = rows(group_entry_points("flexq"))
    assert ours == rows(entry_points(group="flexq"))
    assert len(ours) >= 9  # every first-party format of this environment


def test_shadowed_copies_spaced_headers_and_other_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    dist(first, "demo-format", "2.0", "[flexq]\ndemo = demo_v2.plugin:plugin\n")
    # the same distribution later on sys.path: importlib.metadata keeps the first only
    dist(second, "demo-format", "1.0", "[flexq]\ndemo = demo_v1.plugin:plugin\n")
    dist(second, "spaced", "1.0", "[console_scripts]\nx = a:b\n\n[ flexq ]\nspaced = sp:plugin\n")
    dist(second, "cli-only", "1.0", "[console_scripts]\nflexq = flexq.cli:main\n")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    ours = rows(group_entry_points("flexq"))
    assert ours == rows(entry_points(group="flexq"))
    names = [r[0] for r in ours]
    assert ("demo", "demo_v2.plugin:plugin", "flexq", "demo-format") in ours
    assert names.count("demo") == 1
    assert "spaced" not in names  # importlib.metadata's group is " flexq " there
    assert "flexq" not in names  # the console script is not a format
