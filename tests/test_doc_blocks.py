"""Issue 29, item 4 of its list: the docs name every installed format, generated, not typed.

The format sentence of README.md and docs/user-guide.md, and the user guide's install
commands, are rebuilt from ``flexq.list_formats()`` (flexq.cli.doc_blocks); these tests
fail when the text is stale, and so does the core's table of first-party formats
(flexq/plugin/published.py). ~1 s.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import flexq
from flexq.cli.doc_blocks import FILES, block_names, generated_files, render

ROOT = Path(__file__).resolve().parents[1]
FORMAT_PACKAGES = sorted(ROOT.glob("packages/format-*/pyproject.toml"))


def test_every_format_package_of_the_repo_is_installed_so_the_blocks_can_be_generated() -> None:
    installed = {r.distribution for r in flexq.list_formats() if r.error is None}
    for pyproject in FORMAT_PACKAGES:
        dist = tomllib.loads(pyproject.read_text())["project"]["name"]
        assert dist in installed, f"pip install -e {pyproject.parent}"


@pytest.mark.parametrize("name", FILES)
def test_generated_blocks_are_current(name: str) -> None:
    text = (ROOT / name).read_text()
    assert block_names(text), f"{name} has no generated block"
    assert render(text, flexq.list_formats()) == text, (
        f"{name} is stale: run `python -m flexq.cli.doc_blocks .` from the repository root"
    )


def test_every_generated_file_is_current() -> None:
    """README/docs blocks, docs/formats.md and the core's first-party table
    (flexq/plugin/published.py) read as ``python -m flexq.cli.doc_blocks .`` writes them."""
    stale = [
        str(path.relative_to(ROOT))
        for path, text in generated_files(ROOT, flexq.list_formats()).items()
        if path.read_text() != text
    ]
    assert stale == [], f"{stale} stale: run `python -m flexq.cli.doc_blocks .` from the root"


def test_the_published_table_is_what_the_repos_format_packages_claim() -> None:
    """The generated table names, for every config method an installed first-party format
    claims, exactly those formats, and every package directory's distribution."""
    from flexq.plugin import published

    rows = flexq.list_formats()
    dists = {
        tomllib.loads(p.read_text())["project"]["name"]
        for p in ROOT.glob("packages/*/pyproject.toml")
    }
    assert dists == published.DISTRIBUTIONS
    claims = {(m, r.name) for r in rows if r.distribution in dists for m in r.methods}
    table = {(m, name) for m, pairs in published.PUBLISHED.items() for name, _ in pairs}
    assert table == claims
    assert published.PUBLISHED["quark"] == (("quark", "flexq-format-quark"),)


def test_a_new_format_package_changes_only_generated_text(tmp_path: Path) -> None:
    """A format package the table does not know yet (a copy of the repository's layout
    with one more distribution) makes the table stale, and the regenerated table names it:
    so adding a format edits no hand-kept line in the core."""
    from flexq.cli.published import published_module

    rows = flexq.list_formats()
    extra = flexq.plugin.manager.FormatInfo(
        "new-x", "0.1.0", "flexq-format-new-x", "entry point", "a new format", methods=("new-x",)
    )
    dists = sorted({*flexq.plugin.published.DISTRIBUTIONS, "flexq-format-new-x"})
    text = published_module([*rows, extra], dists, {"weight_new": "new-x tensors"})
    assert text != (ROOT / "packages/core/src/flexq/plugin/published.py").read_text()
    namespace: dict[str, object] = {}
    exec(compile(text, "published.py", "exec"), namespace)
    assert namespace["PUBLISHED"]["new-x"] == (("new-x", "flexq-format-new-x"),)  # type: ignore[index]
    assert "flexq-format-new-x" in namespace["DISTRIBUTIONS"]  # type: ignore[operator]
    assert namespace["COMPANIONS"] == {"weight_new": "new-x tensors"}


def test_a_hand_edited_count_is_caught_as_stale() -> None:
    text = (ROOT / "README.md").read_text()
    count = f"{len(FORMAT_PACKAGES)} format packages ship"
    assert count in text
    stale = text.replace(count, "3 format packages ship")
    assert render(stale, flexq.list_formats()) == text


def test_the_user_guide_installs_every_format_package() -> None:
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    install = guide.split("<!-- generated: install-formats -->", 1)[1].split("<!-- end", 1)[0]
    line = next(ln for ln in install.splitlines() if ln.startswith("pip install packages/core"))
    listed = sorted(w for w in line.split() if w.startswith("packages/format-"))
    assert listed == [str(p.parent.relative_to(ROOT)) for p in FORMAT_PACKAGES]
    assert f'"{len(FORMAT_PACKAGES)} formats installed"' in install


def test_the_plugin_guide_gives_no_count_of_the_format_packages() -> None:
    guide = (ROOT / "docs" / "plugin-guide.md").read_text()
    for word in ("three", "four", "five", "six"):
        assert f"{word} format packages" not in guide


def test_cli_md_and_the_readme_agree_on_what_the_demo_loads() -> None:
    readme = (ROOT / "README.md").read_text()
    cli = (ROOT / "docs" / "cli.md").read_text().split("## `flexq demo", 1)[1]
    said = "builds a tiny paddleformers llama, writes it in every installed format"
    assert said in " ".join(readme.split()).lower()
    assert said in " ".join(cli.split()).lower()
    assert "flexq.paddleformers.from_pretrained" in readme
    assert "flexq.paddleformers.from_pretrained" in cli
