"""The kept-vs-bf16 tables of docs/performance.md's kept section, for :mod:`bench.kept_load`
(one fresh process a load) and :mod:`bench.kept_pf` (medians of several)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

MIB = 1 << 20


def paragraph(
    intro: str,
    cases: Iterable[dict[str, Any]],
    figures: str,
    name: Callable[[dict[str, Any]], str],
    note: str,
) -> list[str]:
    """``intro``, the table of every case's loads and the ratios sentence (ending in
    ``note``), as markdown lines."""
    rows, ratios = table(cases, figures, name)
    return [intro, "", *rows, "", f"kept / bf16: {ratios}. {note}"]


def table(
    cases: Iterable[dict[str, Any]], figures: str, name: Callable[[dict[str, Any]], str]
) -> tuple[list[str], str]:
    """The table of every case's loads (``case[figures]``: kind -> its figures) and the
    ratios sentence, each case called ``name(case)`` there."""
    cases = list(cases)
    rows = [
        f"| {c['model']} | {kind} | {f['parameter_bytes'] / MIB:.0f} MiB "
        f"| {f['peak_extra_rss'] / MIB:.0f} MiB | {f['seconds']:.2f} s |"
        for c in cases
        for kind, f in c[figures].items()
    ]
    ratios = "; ".join(
        f"{name(c)}: parameters {c['parameter_ratio']:.2f}x, peak RSS {c['peak_rss_ratio']:.2f}x"
        for c in cases
    )
    head = [
        "| model | load | parameters | peak RSS | seconds |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    return [*head, *rows], ratios
