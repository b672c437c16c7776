"""Each bench series' section of docs/performance.md is that series' rendering of the results
file the section cites: the page says what the results say, never a hand edit."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import discovery, kept_load, physical, report  # noqa: E402


@pytest.mark.parametrize(("series", "key"), [(physical, "physical"), (discovery, "discovery")])
def test_the_section_is_generated_from_the_results_it_names(series: ModuleType, key: str) -> None:
    page = (ROOT / "docs" / "performance.md").read_text().splitlines()
    start = page.index(series.HEADING)
    end = next((i for i in range(start + 1, len(page)) if page[i].startswith("## ")), len(page))
    found = re.search(r"Figures in `(bench/results/\S+\.json)`", "\n".join(page[start:end]))
    assert found is not None
    results = json.loads((ROOT / found.group(1)).read_text())
    f = results.get("figures", results.get(key))
    rendered = "\n".join(series.markdown(f, found.group(1))).rstrip("\n")
    assert rendered == "\n".join(page[start:end]).rstrip("\n")


def test_a_page_regenerated_from_a_run_keeps_the_sections_series_wrote(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    before = "# P\n\n## Main\n\nold main\n\n## Verify\n\nv\n\n## Decoders\n\nd\n\n## Notes\n\n- n\n"
    doc.write_text("# P\n\n## Main\n\nnew main\n\n## Notes\n\n- m\n")  # one run's page
    report.keep_sections(doc, before)
    assert doc.read_text() == (
        "# P\n\n## Main\n\nnew main\n\n## Verify\n\nv\n\n## Decoders\n\nd\n\n## Notes\n\n- m\n"
    )


def test_a_whole_run_without_paddleformers_leaves_the_kept_section_to_its_own_run() -> None:
    flat: dict[str, Any] = {"cases": {}}
    assert report.kept_section({**flat, "paddleformers": {"skipped": "not installed"}}) == []
    section = report.kept_section(flat)
    assert section[:2] == ["", kept_load.HEADING]
