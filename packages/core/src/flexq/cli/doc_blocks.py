"""The parts of README.md and docs/*.md that name the installed formats, generated.

For the maintainers: counts and lists of formats are not typed by hand (they went stale:
"three of seven"); each lives between ``<!-- generated: NAME -->`` and ``<!-- end
generated: NAME -->`` and is rebuilt from :func:`flexq.list_formats` with every format
package of the repository installed. ``python -m flexq.cli.doc_blocks .`` rewrites them,
docs/formats.md and the core's first-party table (:func:`generated_files`; ``nox -s docs``
checks them: tests/test_doc_blocks.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from flexq.plugin.manager import FormatInfo

#: The files that hold generated blocks, relative to the repository root.
FILES = ("README.md", "docs/user-guide.md", "docs/index.md")
_BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
    re.S,
)


def _packaged(rows: Sequence[FormatInfo]) -> list[FormatInfo]:
    return [r for r in rows if r.source == "entry point" and r.error is None]


def _what(row: FormatInfo) -> str:
    """A format's description up to its first colon: ``FP8 E4M3 weights``."""
    return row.description.split(":", 1)[0].rstrip(".")


def format_sentence(rows: Sequence[FormatInfo]) -> str:
    """``7 format packages ship in this repository: `fp8`: FP8 E4M3 weights; ...``."""
    found = _packaged(rows)
    names = "; ".join(f"`{r.name}`: {_what(r)}" for r in found)
    return f"{len(found)} format packages ship in this repository: {names}.\n"


def install_block(rows: Sequence[FormatInfo]) -> str:
    """The user guide's install commands: the core and every format package."""
    found = _packaged(rows)
    packages = " ".join(_directory(r) for r in found)
    return (
        "```bash\n"
        'pip install paddlepaddle==3.3.1   # the CPU build; for GPUs see "GPU install" below\n'
        f"pip install packages/core {packages}\n"
        f"flexq list-formats               # the {len(found)} formats, then "
        f'"{len(found)} formats installed"\n'
        "```\n"
    )


def _directory(row: FormatInfo) -> str:
    """The package directory of a first-party format: ``packages/format-fp8``."""
    return f"packages/{row.distribution.removeprefix('flexq-')}"


def _summary(row: FormatInfo) -> str:
    """The distribution's one-line summary (its pyproject ``description``), without the
    ``flexq format plugin:`` / ``for flexq.`` wrapping some of them carry."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        text = metadata(row.distribution)["Summary"] or _what(row)
    except PackageNotFoundError:
        text = _what(row)
    text = text.removeprefix("flexq format plugin: ").removesuffix(".")
    return text.removesuffix(" for flexq").rstrip(",")


def package_table(rows: Sequence[FormatInfo]) -> str:
    """README's table of the format packages: directory, distribution, summary."""
    lines = ["| format package | what it decodes |", "|---|---|"]
    lines += [f"| `{_directory(r)}` | `{r.distribution}`: {_summary(r)} |" for r in _packaged(rows)]
    return "\n".join(lines) + "\n"


def format_links(rows: Sequence[FormatInfo]) -> str:
    """docs/index.md's line of links to every format package's README."""
    links = ", ".join(f"[{r.name}](../{_directory(r)}/README.md)" for r in _packaged(rows))
    return f"- Formats: {links}.\n"


BLOCKS: dict[str, Callable[[Sequence[FormatInfo]], str]] = {
    "format-sentence": format_sentence,
    "install-formats": install_block,
    "format-packages": package_table,
    "format-links": format_links,
}


def render(text: str, rows: Sequence[FormatInfo]) -> str:
    """``text`` with every generated block rebuilt (an unknown block name is an error)."""

    def body(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise KeyError(f"no generator for the block {name!r} (known: {sorted(BLOCKS)})")
        return f"{match[1]}{BLOCKS[name](rows)}{match[4]}"

    return _BLOCK.sub(body, text)


def block_names(text: str) -> list[str]:
    """The generated blocks ``text`` holds, in order."""
    return [m["name"] for m in _BLOCK.finditer(text)]


def generated_files(root: Path, rows: Sequence[FormatInfo]) -> dict[Path, str]:
    """Every generated text under ``root`` as it should read: the blocks of :data:`FILES`,
    docs/formats.md and the core's table of first-party formats
    (:mod:`flexq.plugin.published`). A new format package changes these and nothing
    else outside its directory."""
    from flexq.cli.documents import formats_page
    from flexq.cli.published import (
        MODULE,
        published_module,
        unguarded_companions,
        workspace_distributions,
    )

    texts = {root / name: render((root / name).read_text(), rows) for name in FILES}
    texts[root / "docs" / "formats.md"] = formats_page(list(rows))
    dists = workspace_distributions(root)
    companions = unguarded_companions(rows, dists)
    texts[root / MODULE] = published_module(rows, dists, companions)
    return texts


def main(root: Path) -> int:
    """Rewrite every generated text under ``root``; prints what changed."""
    from flexq.plugin.manager import list_formats

    for path, new in generated_files(root, list_formats()).items():
        if not path.is_file() or path.read_text() != new:
            path.write_text(new)
            print(f"rewrote {path.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()))
