"""The documentation shows the code that actually ships."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "plugins" / "flexq-format-int8row"


def test_plugin_guide_embeds_the_example_package_verbatim() -> None:
    guide = (ROOT / "docs" / "plugin-guide.md").read_text()
    source = (EXAMPLE / "src" / "flexq_int8row" / "__init__.py").read_text().rstrip()
    pyproject = (EXAMPLE / "pyproject.toml").read_text().rstrip()
    assert f"```python\n{source}\n```" in guide
    assert f"```toml\n{pyproject}\n```" in guide


def test_cli_reference_covers_every_subcommand() -> None:
    from flexq.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    commands = set(sub.choices)  # type: ignore[arg-type]
    text = (ROOT / "docs" / "cli.md").read_text()
    assert commands == {"list-formats", "inspect", "convert", "demo"}
    for command in commands:
        assert f"## `flexq {command}" in text


def test_readme_starts_with_the_two_fresh_machine_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert block[0].startswith("python -m pip install nox && python -m nox -s demo")
    assert block[1].startswith("python -m pip install nox && python -m nox -s tests")


def test_relative_links_in_the_docs_resolve() -> None:
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
