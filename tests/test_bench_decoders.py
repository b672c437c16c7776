"""The decoders series (`nox -s bench -- decoders`): the table it folds the format
benches' figures into, its goal against issue 30's bar and its section of the docs."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench_module(name: str) -> Iterator[ModuleType]:
    """``bench.<name>`` imported from the repository root (bench/ is not installed)."""
    sys.path.insert(0, str(ROOT))
    try:
        yield importlib.import_module(f"bench.{name}")
    finally:
        sys.path.remove(str(ROOT))


@pytest.fixture(scope="module")
def decoders() -> Iterator[ModuleType]:
    yield from _bench_module("decoders")


@pytest.fixture(scope="module")
def formats() -> Iterator[ModuleType]:
    yield from _bench_module("formats")


FIGURES = {
    "format-fp8": {
        "fp8_block128_f32_gbps": 9.0,
        "fp8_block128_bf16_gbps": 6.5,
        "memcpy_gbps": 20.0,
    },
    "format-gptq": {"gptq3_gbps": 7.0, "gptq3_bf16_gbps": 5.0, "memcpy_gbps": 20.0},
    "format-gguf": {"gguf_q4_k_gbps": 10.0, "memcpy_gbps": 20.0},
}


def test_table_pairs_each_cases_float32_and_bfloat16_figures(decoders: ModuleType) -> None:
    rows = {(r["package"], r["case"]): r for r in decoders.table(FIGURES)}
    assert set(rows) == {
        ("format-fp8", "fp8_block128"),
        ("format-gptq", "gptq3"),
        ("format-gguf", "gguf_q4_k"),
    }
    fp8 = rows["format-fp8", "fp8_block128"]
    assert (fp8["float32_gbps"], fp8["bfloat16_gbps"]) == (9.0, 6.5)
    assert fp8["float32_share"] == pytest.approx(0.45)
    assert fp8["bfloat16_share"] == pytest.approx(0.325)
    gguf = rows["format-gguf", "gguf_q4_k"]
    assert gguf["bfloat16_gbps"] is None
    assert gguf["bfloat16_share"] is None


def test_goals_name_the_cases_under_the_bar(decoders: ModuleType) -> None:
    goals = decoders.goals(decoders.table(FIGURES))
    assert not goals["float32"]["met"]  # gptq3 at 35% < 40%
    assert "format-gptq gptq3 35%" in goals["float32"]["measured"]
    assert not goals["bfloat16"]["met"]  # gptq3 at 25% < 30%
    fine = {"format-fp8": FIGURES["format-fp8"]}
    assert all(g["met"] for g in decoders.goals(decoders.table(fine)).values())


def test_markdown_section_replaces_only_its_own_section(
    decoders: ModuleType, tmp_path: Path
) -> None:
    from bench.report import replace_section

    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\n## Other\n\nkept\n\n## Notes\n\nnotes\n")
    lines = decoders.markdown(decoders.table(FIGURES), "bench/results/x.json", "Shared.")
    replace_section(doc, lines)
    replace_section(doc, lines)  # a second run replaces the first
    text = doc.read_text()
    assert text.count(decoders.HEADING) == 1
    assert text.index("## Other") < text.index(decoders.HEADING) < text.index("## Notes")
    assert "| format-fp8 | fp8_block128 | 9.00 | 45% | 6.50 | 32% | 20.00 |" in text
    assert "| **goal** | every case | | >= 40% (met: False) | | >= 30% (met: False) | |" in text
    assert "kept" in text
    assert "notes" in text


@pytest.mark.parametrize(
    "package", ["format-gptq", "format-ct-int", "format-int4-awq", "format-quark"]
)
def test_format_benches_report_float32_and_bfloat16_beside_memcpy(
    package: str, decoders: ModuleType
) -> None:
    from flexq.testing import load_script

    (script,) = (ROOT / "packages" / package / "bench").glob("bench_*.py")
    bench = load_script(script)
    # tiny: the figures, not the speed
    for name, value in (("OUT_FEATURES", 256), ("IN_FEATURES", 256), ("ROUNDS", 1)):
        setattr(bench, name, value)
    figures = bench.measure()
    assert "memcpy_gbps" in figures
    assert all(v > 0 for v in figures.values())
    rows = decoders.table({package: figures})
    assert len(rows) >= 2
    for r in rows:  # every case has both figures, paired by name
        assert r["float32_gbps"] is not None, r
        assert r["bfloat16_gbps"] is not None, r


def test_a_package_filter_selects_those_benches_and_names_unknown_ones(
    formats: ModuleType,
) -> None:
    every = formats.bench_modules()
    assert formats.selected(None) == every == formats.selected([])
    picked = formats.selected(["format-gptq", "format-ct-int"])
    assert set(picked) == {"format-gptq", "format-ct-int"}
    assert picked["format-gptq"] == every["format-gptq"]
    with pytest.raises(ValueError, match="no bench for format-nope; .*format-gptq"):
        formats.selected(["format-gptq", "format-nope"])
