"""docs/performance.md's keep-quantized section is bench/kept_load.py's rendering of the
results file it names (``nox -s bench -- kept`` writes both), so its figures cannot drift
from the measurements."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_kept_section_is_rendered_from_the_results_it_names() -> None:
    sys.path.insert(0, str(ROOT))
    from bench.kept_load import HEADING, markdown

    text = (ROOT / "docs" / "performance.md").read_text().splitlines()
    start = text.index(HEADING)
    end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
    section = text[start:end]
    found = re.search(r"figures in `(bench/results/\S+-kept\.json)`", "\n".join(section))
    assert found is not None, "the kept section names no results file"
    results = json.loads((ROOT / found.group(1)).read_text())
    assert [*markdown(results["kept"], found.group(1)), ""] == section
    pf = results["kept"]["paddleformers"]
    assert "skipped" not in pf, pf  # the committed figures include the PaddleFormers models
    assert set(pf["cases"]) == {"llama-fp8", "gpt-oss-mxfp4"}
    for case in pf["cases"].values():
        assert case["rounds"] >= 3
        assert all(len(runs) == case["rounds"] for runs in case["runs"].values())
