"""The tables ``flexq list-formats`` and ``flexq inspect`` print, laid out for a terminal.

For the people who read them at 80 columns: prose wraps at spaces, tensor names fold at
their dots and underscores, no word is cut (rich's own collapsing shrinks the widest
column first and cuts words mid-way), and each table ends with a one-line summary.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich import box
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from flexq.cli.documents import InspectDocument
    from flexq.plugin.manager import FormatInfo

#: Where a tensor name may fold: after a dot or an underscore (``model.layers.0.``).
_NAME_PARTS = re.compile(r"[^._]*[._]|[^._]+$")
#: The narrowest a folded name column gets, however wide the other columns are.
_MIN_NAME = 12


def fold_name(name: str, width: int, indent: str = "") -> str:
    """``name`` as lines of at most ``width`` characters, broken after dots and
    underscores (a part longer than a line is cut, the only place a cut happens);
    continuation lines start with ``indent`` too."""
    lines: list[str] = []
    line = indent
    for part in _NAME_PARTS.findall(name):
        if line.strip() and len(line) + len(part) > width:
            lines.append(line)
            line = indent
        while len(line) + len(part) > width and width > len(indent):
            cut = width - len(line)
            lines.append(line + part[:cut])
            line, part = indent, part[cut:]
        line += part
    lines.append(line)
    return "\n".join(lines)


def _widths(
    rows: Sequence[Sequence[str]], width: int, names: int, wrap: frozenset[int]
) -> list[int]:
    """Column widths that fit ``width``: every column its longest line, except column
    ``names`` (it gets what is left and folds) and the ``wrap`` columns (prose: at least
    their longest word, more when there is room)."""
    count = len(rows[0])
    # SIMPLE_HEAD: a space of padding either side of each column, a one-space edge either
    # side of the table and a one-space rule between columns.
    room = width - 2 - 2 * count - (count - 1)

    def longest(i: int, split: bool) -> int:
        cells = [r[i] for r in rows]
        parts = [w for c in cells for w in (c.split() if split else c.splitlines())]
        return max(map(len, parts), default=1)

    natural = [longest(i, split=False) for i in range(count)]
    if sum(natural) <= room:
        return natural
    least = [longest(i, split=True) if i in wrap else natural[i] for i in range(count)]
    least[names] = min(_MIN_NAME, natural[names])
    left = room - sum(least)
    out = list(least)
    for i in [names, *sorted(wrap)]:  # the names first: a folded name costs most lines
        extra = max(min(natural[i] - least[i], left), 0)
        out[i] += extra
        left -= extra
    return out


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[int]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    for header, w in zip(headers, widths, strict=True):
        table.add_column(header, width=w, overflow="fold")
    return table


def claims(methods: Sequence[str]) -> list[str]:
    """The claimed methods for a terminal: compressed-tensors formats spelled as the
    config does (``compressed-tensors: float-quantized``), so the cell wraps at a space
    instead of cutting a 39-character name."""
    return [m.replace("compressed-tensors/", "compressed-tensors: ") for m in methods]


def formats_table(rows: Sequence[FormatInfo], width: int) -> Table:
    """``flexq list-formats``: name, version, claimed methods, distribution and description."""
    headers = ("name", "version", "claims", "distribution, description")
    cells = [
        (
            r.name,
            r.version,
            "\n".join(claims(r.methods)),
            "\n".join(filter(None, (r.distribution, r.error or r.description))),
        )
        for r in rows
    ]
    widths = _widths([headers, *cells], width, names=0, wrap=frozenset({2, 3}))
    table = _table(headers, cells, widths)
    for row in cells:
        table.add_row(*map(escape, row))
    return table


def formats_summary(rows: Sequence[FormatInfo]) -> str:
    """``7 formats installed`` (and how many of them failed to load)."""
    failed = sum(r.error is not None for r in rows)
    text = f"{_count(len(rows), 'format')} installed"
    return text + (f", {failed} failed to load (see the table)" if failed else "")


def _relative(component: str, logical: str) -> str:
    """A component's name below its logical tensor's: ``weight_scale_inv`` under
    ``model.layers.0.mlp.down_proj.weight``; the whole name when they share no module."""
    module = logical.rpartition(".")[0]
    return component.removeprefix(f"{module}.") if module else component


def inspect_table(document: InspectDocument, width: int) -> Table:
    """``flexq inspect``: a line per logical tensor (name, format, shape and dtype), and
    below it, indented, a line per stored component (name, shape and dtype, file)."""
    headers = ("tensor / stored component", "format", "shape, dtype", "file")
    rows: list[tuple[str, str, str, str]] = []
    for t in document.tensors:
        rows.append((t.key, t.format, f"{t.shape} {t.dtype}", ""))
        for c in t.components:
            rows.append(("  " + _relative(c.key, t.key), "", f"{c.shape} {c.dtype}", c.file))
    widths = _widths([headers, *rows], width, names=0, wrap=frozenset())
    table = _table(headers, rows, widths)
    for row in rows:
        indent = "  " if row[0].startswith("  ") else ""
        name = fold_name(row[0].removeprefix(indent), widths[0], indent)
        table.add_row(escape(name), *map(escape, row[1:]))
    return table


def inspect_summary(document: InspectDocument) -> str:
    """``16 tensors in 1 file (8,224 bytes), 8 logical, 1 format, 0 problems``."""
    stored = sum(len(t.components) for t in document.tensors)
    files = {c.file for t in document.tensors for c in t.components}
    formats = {t.format for t in document.tensors if t.format != "passthrough"}
    return (
        f"{_count(stored, 'tensor')} in {_count(len(files), 'file')} "
        f"({document.total_bytes:,} bytes), {len(document.tensors)} logical, "
        f"{_count(len(formats), 'format')}, {_count(len(document.problems), 'problem')}"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
