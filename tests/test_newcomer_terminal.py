"""Issue 29, items 4 and 5: ``flexq list-formats`` and ``flexq inspect`` at 80 columns.

A fixed-width rich console stands in for the terminal; the tables must fit it, fold
tensor names only at dots and underscores, never cut a word of prose, and end with a
one-line summary. ``--json`` is not touched by any of this.
"""

from __future__ import annotations

import importlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from flexq.cli.tables import fold_name
from flexq.plugin.manager import list_formats
from flexq_fp8 import save_fp8_checkpoint

cli = importlib.import_module("flexq.cli.main")  # flexq.cli.main is also a function's name
LAYERS = 2
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def run_at_80(monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", lambda: Console(width=80, file=out, color_system=None))
    code = cli.main(list(argv))
    return code, out.getvalue().splitlines()


@pytest.fixture(scope="module")
def two_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    weights = {
        f"model.layers.{i}.self_attn.{p}.weight": rng.standard_normal((32, 32)).astype(np.float32)
        for i in range(LAYERS)
        for p in PROJECTIONS
    }
    return save_fp8_checkpoint(tmp_path_factory.mktemp("ckpt") / "c", weights)


def words(lines: list[str]) -> set[str]:
    return {w for line in lines for w in re.split(r"[\s│]+", line) if w}


def test_list_formats_fits_80_columns_and_no_claimed_method_is_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, lines = run_at_80(monkeypatch, "list-formats")
    assert code == 0
    assert max(map(len, lines)) <= 80
    text = "\n".join(lines)
    assert "…" not in text
    seen = words(lines)
    for row in list_formats():
        assert row.name in seen
        assert row.distribution in seen
        for method in row.methods:
            # compressed-tensors/x is shown as the config spells it, "compressed-tensors: x"
            assert method.rpartition("/")[2] in seen, method
        for word in row.description.split():
            assert word in seen, word  # wrapped at spaces, never cut mid-word


def test_list_formats_ends_with_how_many_formats_are_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, lines = run_at_80(monkeypatch, "list-formats")
    assert lines[-1] == f"{len(list_formats())} formats installed"


def test_inspect_fits_80_columns_folding_names_at_dots_and_underscores(
    monkeypatch: pytest.MonkeyPatch, two_layers: Path
) -> None:
    code, lines = run_at_80(monkeypatch, "inspect", str(two_layers))
    assert code == 0
    assert max(map(len, lines)) <= 80
    # every line of a folded name ends at a dot or an underscore (or is the name's end)
    name_cells = [line[2:30].rstrip() for line in lines[3:-1] if line[2:4].strip()]
    assert name_cells
    for cell in name_cells:
        assert cell.endswith((".", "_", "weight")), cell
    joined = "".join(name_cells)
    for i in range(LAYERS):
        for p in PROJECTIONS:
            assert f"model.layers.{i}.self_attn.{p}.weight" in joined
    # one line per stored component, named below its logical tensor, file in full
    components = [line for line in lines if line.startswith("    weight")]
    assert len(components) == 2 * LAYERS * len(PROJECTIONS)
    assert all("model.safetensors" in line for line in components)
    # the 382-line layout of issue 29 is gone: a logical tensor costs 4 lines here, and
    # the table's head, its last blank line and the summary 5
    assert len(lines) == 5 + 4 * LAYERS * len(PROJECTIONS)


def test_inspect_ends_with_a_summary_line(
    monkeypatch: pytest.MonkeyPatch, two_layers: Path
) -> None:
    _, lines = run_at_80(monkeypatch, "inspect", str(two_layers))
    logical = LAYERS * len(PROJECTIONS)
    assert re.fullmatch(
        rf"{2 * logical} tensors in 1 file \([\d,]+ bytes\), {logical} logical, 1 format, "
        r"0 problems",
        lines[-1],
    ), lines[-1]


def test_inspect_json_keeps_full_names_and_no_summary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], two_layers: Path
) -> None:
    code, lines = run_at_80(monkeypatch, "inspect", str(two_layers), "--json")
    assert code == 0
    assert lines == []
    document = json.loads(capsys.readouterr().out)
    assert {c["key"] for t in document["tensors"] for c in t["components"]} == {
        f"model.layers.{i}.self_attn.{p}.weight{s}"
        for i in range(LAYERS)
        for p in PROJECTIONS
        for s in ("", "_scale_inv")
    }


@pytest.mark.parametrize(
    ("name", "width", "indent", "folded"),
    [
        ("model.layers.0.mlp.down_proj.weight", 16, "", "model.layers.0.\nmlp.down_proj.\nweight"),
        ("weight_scale_inv", 11, "  ", "  weight_\n  scale_inv"),
        ("short.name", 40, "", "short.name"),
        ("abcdefghijklmnop", 6, "", "abcdef\nghijkl\nmnop"),  # one part longer than a line
    ],
)
def test_fold_name_breaks_after_dots_and_underscores(
    name: str, width: int, indent: str, folded: str
) -> None:
    assert fold_name(name, width, indent) == folded
