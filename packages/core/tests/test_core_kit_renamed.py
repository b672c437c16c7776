"""Kit API 1.1 renamed eight names; a plugin built for 1.0 that imports the old ones keeps working.

The old names are the new objects themselves (not copies, not wrappers), resolve without a
warning, stay out of ``__all__`` (new code is not offered them) and are documented as
deprecated in the plugin guide.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import flexq.formatkit as kit

# rename: keep (the old names are what this module tests: the issue-25 codemod skips it)

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("old", "new"), sorted(kit.RENAMED.items()))
def test_an_old_kit_name_is_the_new_object_without_a_warning(old: str, new: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(kit, old) is getattr(kit, new)
    assert new in kit.__all__
    assert old not in kit.__all__


def test_a_plugin_written_for_api_1_0_imports_the_old_names() -> None:
    """The import block of a 1.0 plugin (the guide's example as it was) still runs."""
    namespace: dict[str, object] = {}
    exec(
        "from flexq.formatkit import (Layout, Sources, for_bands, for_row_runs, nibble_blocks,"
        " per_checkpoint, row_runs, run_parts)",
        namespace,
    )
    assert namespace["Sources"] is kit.BoxSources
    assert namespace["per_checkpoint"] is kit.cached_per_checkpoint


def test_an_unknown_kit_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'dequantize'"):
        kit.dequantize  # noqa: B018  (the attribute access is the test)


def test_the_guide_documents_every_old_name_with_its_new_one() -> None:
    guide = (ROOT / "docs" / "plugin-guide.md").read_text()
    missing = [f"`{o}` | `{n}`" for o, n in kit.RENAMED.items() if f"`{o}` | `{n}`" not in guide]
    assert not missing, missing


# rename: end
