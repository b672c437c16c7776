"""Every format's decode against memcpy, float32 and bfloat16 out (issue 30's bar).

For ``nox -s bench -- decoders`` (``python bench/run.py decoders``) and the full run:
the format packages' own benches (:func:`bench.formats.measure_all`, each timing its
cases and a memcpy of the same float32 bytes in alternating rounds, medians) folded
into one table, a case's float32 and bfloat16 figures side by side. bfloat16 figures
are GB/s of float32-sized output (elements x 4 bytes per second), so both columns
divide by the same memcpy; the bar is >= 40% of memcpy into float32 and >= 30% into
bfloat16, for every case.
"""

from __future__ import annotations

from typing import Any

#: The issue's bar: share of memcpy, per output dtype.
GOALS = {"float32": 0.40, "bfloat16": 0.30}
HEADING = "## Decoders vs memcpy, float32 and bfloat16 out (issue 30)"
_SUFFIX = "_gbps"
_BF16 = "_bf16"


def table(formats: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One row per (package, case): GB/s and share of the package's memcpy, float32 and
    bfloat16 (None where the bench has no such case)."""
    rows = []
    for pkg, figures in formats.items():
        memcpy = figures.get("memcpy" + _SUFFIX, 0.0)
        cases: dict[str, dict[str, float]] = {}
        for key, value in figures.items():
            if not key.endswith(_SUFFIX) or key.startswith("memcpy"):
                continue
            name = key.removesuffix(_SUFFIX)
            dtype = "bfloat16" if name.endswith(_BF16) else "float32"
            base = name.removesuffix(_BF16).removesuffix("_f32")
            cases.setdefault(base, {})[dtype] = value
        for case, by_dtype in cases.items():
            row: dict[str, Any] = {"package": pkg, "case": case, "memcpy_gbps": memcpy}
            for dtype in GOALS:
                v = by_dtype.get(dtype)
                row[f"{dtype}_gbps"] = v
                row[f"{dtype}_share"] = v / memcpy if v is not None and memcpy else None
            rows.append(row)
    return rows


def goals(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per output dtype: the smallest share of memcpy and the cases under the bar."""
    out = {}
    for dtype, bar in GOALS.items():
        measured = [r for r in rows if r[f"{dtype}_share"] is not None]
        low = [r for r in measured if r[f"{dtype}_share"] < bar]
        worst = min(measured, key=lambda r: r[f"{dtype}_share"], default=None)
        out[dtype] = {
            "goal": f"every case's decode GB/s into {dtype} / memcpy GB/s, same run",
            "target": f">= {bar:.0%}",
            "measured": (
                f"lowest {worst[f'{dtype}_share']:.0%} ({worst['package']} {worst['case']}); "
                f"{len(measured) - len(low)} of {len(measured)} cases at the bar"
                + ("; under it: " + ", ".join(_name(r, dtype) for r in low) if low else "")
                if worst
                else "no case"
            ),
            "met": bool(measured) and not low,
        }
    return out


def _name(r: dict[str, Any], dtype: str) -> str:
    return f"{r['package']} {r['case']} {r[f'{dtype}_share']:.0%}"


def _cell(v: float | None, share: float | None) -> str:
    return "" if v is None or share is None else f"{v:.2f} | {share:.0%}"


def markdown(rows: list[dict[str, Any]], json_name: str, note: str) -> list[str]:
    """The decoders section of docs/performance.md."""
    lines = [
        HEADING,
        "",
        f"Each format package's bench (`packages/format-*/bench`), sources in memory, into "
        f"outputs written before; each case alternates with a memcpy of the same float32 "
        f"bytes, medians. bfloat16: GB/s of float32-sized output into a bfloat16 target as "
        f"a load does it: rounded once by the format itself, straight into the target "
        f"(kit API 1.2's `rounded_out`: fp8 under one scale by its codes' 256 rounded "
        f"products; every other case here but Quark's per-channel FP8 band by band, each "
        f"band rounded while in cache), or by the core from a float32 work array. "
        f"{note} Figures in `{json_name}` "
        f"(`nox -s bench -- decoders`).",
        "",
        "| package | case | float32 GB/s | % of memcpy | bfloat16 GB/s | % of memcpy "
        "| memcpy GB/s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        f32 = _cell(r["float32_gbps"], r["float32_share"]) or " | "
        bf16 = _cell(r["bfloat16_gbps"], r["bfloat16_share"]) or " | "
        lines.append(f"| {r['package']} | {r['case']} | {f32} | {bf16} | {r['memcpy_gbps']:.2f} |")
    g = goals(rows)
    lines.append(
        f"| **goal** | every case | | >= {GOALS['float32']:.0%} (met: {g['float32']['met']}) "
        f"| | >= {GOALS['bfloat16']:.0%} (met: {g['bfloat16']['met']}) | |"
    )
    lines += ["", "| goal | target | measured | met |", "| --- | --- | --- | --- |"]
    for v in g.values():
        lines.append(f"| {v['goal']} | {v['target']} | {v['measured']} | {v['met']} |")
    return [*lines, ""]
