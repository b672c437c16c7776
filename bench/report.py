"""Write one run's results: ``bench/results/<date>.json``, the chart, ``docs/performance.md``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import kept_load

ROOT = Path(__file__).resolve().parents[1]
GB = 1e9
MB = 1 << 20


def write_json(results: dict[str, Any], date: str) -> Path:
    """``bench/results/<date>.json`` (overwritten by a second run on the same day)."""
    out = ROOT / "bench" / "results" / f"{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    return out


def replace_section(doc: Path, lines: list[str]) -> None:
    """Put ``lines`` (a section whose first line is its ``## `` heading) into ``doc``: over
    the old section of that heading, else before the Notes section (else at the end), so a
    series run alone (``verify``, ``kept``, ``decoders``) leaves the rest of the page as it
    was."""
    heading = lines[0]
    text = doc.read_text().splitlines() if doc.exists() else ["# Performance", ""]
    if heading in text:
        start = text.index(heading)
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
    else:
        start = end = next((i for i, t in enumerate(text) if t == "## Notes"), len(text))
    doc.write_text("\n".join([*text[:start], *lines, *text[end:]]).rstrip("\n") + "\n")


def sections(text: str) -> dict[str, list[str]]:
    """The ``## `` sections of a page (Notes aside), heading -> lines, in page order."""
    lines = text.splitlines()
    starts = [i for i, t in enumerate(lines) if t.startswith("## ") and t != "## Notes"]
    out = {}
    for i in starts:
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
        out[lines[i]] = [*lines[i:end]]
    return out


def keep_sections(doc: Path, before: str) -> None:
    """Put back into ``doc`` the sections ``before`` (its earlier text) had and it lacks now:
    those the series run alone write (verify, decoders, passthrough, ...), which a page
    regenerated from one run's figures does not hold."""
    have = set(doc.read_text().splitlines())
    for heading, lines in sections(before).items():
        if heading not in have:
            replace_section(doc, lines)


def kept_section(kept: dict[str, Any]) -> list[str]:
    """The keep-quantized section of a whole run's page, after a blank line; none when the
    run skipped the PaddleFormers models (the bench session has no paddleformers): the
    section the kept series run alone wrote, with them, then stays on the page
    (:func:`keep_sections`)."""
    if "skipped" in (kept.get("paddleformers") or {}):
        return []
    return ["", *kept_load.markdown(kept)]


def write_chart(results: dict[str, Any], out: Path) -> Path:
    """Four panels: format throughput vs memcpy, default load vs DCP and memcpy, the
    scale series (time and memory), and the cold start of a fresh process."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    ax = axes[0][0]
    names, values = [], []
    for pkg, figures in results.get("formats", {}).items():
        for k, v in figures.items():
            names.append(f"{pkg.removeprefix('format-')}: {k.removesuffix('_gbps')}")
            values.append(v)
    colors = ["tab:gray" if "memcpy" in n else "tab:blue" for n in names]
    ax.barh(names, values, color=colors)
    ax.set_xlabel("GB/s of float32 output (memcpy of the same bytes in grey)")
    ax.set_title("Dequantize throughput vs memcpy")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)

    cases = results.get("fresh", {}).get("cases", {})
    ax = axes[0][1]
    labels, meds, lows, highs, colors = [], [], [], [], []
    palette = {
        "flexq": "tab:blue",
        "flexq-fp8-only": "tab:cyan",
        "dcp": "tab:orange",
        "memcpy": "tab:gray",
    }
    for name in ("x1", "1gib"):
        for kind in palette:
            k = cases.get(name, {}).get("kinds", {}).get(kind)
            if not k:
                continue
            t = k["seconds"]
            labels.append(f"{_size(cases[name]['targets_bytes'])}: {kind}")
            meds.append(t["median"])
            lows.append(t["median"] - t["min"])
            highs.append(t["max"] - t["median"])
            colors.append(palette[kind])
    ax.barh(labels, meds, xerr=[lows, highs], color=colors)
    ax.set_xscale("log")
    ax.set_xlabel("seconds per load, fresh process each (median; bars: range)")
    ax.set_title("Defaults vs torch DCP vs memcpy (block-FP8 -> f32)")
    ax.invert_yaxis()

    ax = axes[1][0]
    series = [(f, cases[f"x{f}"]) for f in (1, 4, 16) if f"x{f}" in cases]
    if series:
        xs = [c["targets_bytes"] / (1 << 30) for _, c in series]
        ax.plot(xs, [c["kinds"]["flexq"]["seconds"]["median"] for _, c in series], "o-",
                label="load seconds (median)")  # fmt: skip
        ax.set_xlabel("GiB of float32 targets (x1, x4, x16 of 12 x 2048^2)")
        ax.set_ylabel("seconds")
        ax2 = ax.twinx()
        peaks = [c["kinds"]["flexq"]["peak_extra_rss"]["median"] / MB for _, c in series]
        ax2.plot(xs, peaks, "s--", color="tab:red", label="peak RSS above targets (MiB)")
        largest = series[0][1]["largest_tensor_bytes"] / MB
        ax2.axhline(1.25 * largest, color="gray", linestyle=":", label="1.25x largest tensor")
        ax2.set_ylim(0, max(max(peaks), 1.25 * largest) * 1.5)
        ax2.set_ylabel("MiB")
        ax.legend(loc="upper left", fontsize=7)
        ax2.legend(loc="lower right", fontsize=7)
    ax.set_title("Scale: time linear, memory flat (one fresh process per load)")

    ax = axes[1][1]
    steps = cases.get("x1", {}).get("kinds", {}).get("coldstart", {}).get("steps_s", {})
    ours = {k: v["median"] * 1000 for k, v in steps.items() if "caller" not in k}
    ax.barh(list(ours), list(ours.values()), color="tab:green")
    ax.set_xlabel("milliseconds (median over fresh processes)")
    ax.set_title("Cold start before the first byte")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def _size(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.0f} GiB" if nbytes >= 1 << 30 else f"{nbytes / 1e6:.0f} MB"


def _range(f: dict[str, float], scale: float = 1.0, unit: str = "ms") -> str:
    """``median (min-max)`` of one figure, scaled."""
    unit = f" {unit}" if unit else ""
    return f"{f['median'] * scale:.0f}{unit} ({f['min'] * scale:.0f}-{f['max'] * scale:.0f})"


def _median_rows(medians: dict[str, float], ratios: dict[str, float]) -> list[str]:
    """``| contender | median | ratio |`` rows (no ratio for the baseline itself)."""
    rows = []
    for k, v in medians.items():
        ratio = ratios.get(k)
        rows.append(f"| {k} | {_fmt_s(v)} | {'' if ratio is None else f'{ratio:.2f}x'} |")
    return rows


def _fmt_s(x: float) -> str:
    return f"{x * 1000:.0f} ms" if x < 10 else f"{x:.1f} s"


def _fresh_lines(r: dict[str, Any]) -> list[str]:
    """The fresh-process sections: defaults vs DCP and memcpy, memory, scale, cold start."""
    fr = r.get("fresh", {})
    cases = fr.get("cases", {})
    if not cases:
        return []
    lines = [
        "",
        f"## The defaults, one load per fresh process ({fr['rounds']} rounds)",
        "",
        "`flexq.load_state_dict(state, path)` with no options into initialised float32 "
        "Paddle targets, alternating with torch DCP's `QuantizedHuggingFaceStorageReader` "
        "into initialised torch tensors and with a memcpy of the same bytes into "
        "initialised Paddle targets, on the same block-FP8 checkpoints (128x128 F32 "
        "scales). Each figure is one call in its own interpreter: the load includes "
        "entry-point discovery, the first compose and the thread pool start (not `import "
        "flexq`, listed under cold start). Peak RSS is VmHWM minus RSS before the call: "
        "memory above the targets, checkpoint pages mapped into the process counted. "
        "Of the physical limit: the median over max(the checkpoint's buffered `dd` read "
        "time from a cold cache, memcpy of the output), both from this run's physical "
        "series (1 GiB case; the section below).",
        "",
        "| case | targets | largest tensor | contender | seconds, median (range) | "
        "GB/s | peak RSS above targets | of largest tensor | of the physical limit |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    from bench import physical  # it formats with this module's helpers

    limits = {"1gib": physical.limit(r["physical"])} if "physical" in r else {}
    for name, c in cases.items():
        for kind, k in c["kinds"].items():
            if kind == "coldstart":
                continue
            t, rss = k["seconds"], k["peak_extra_rss"]
            share = f"{t['median'] / limits[name]:.2f}x" if name in limits else ""
            lines.append(
                f"| {name} ({c['tensors']} x {c['shape'][0]}^2) | {_size(c['targets_bytes'])} "
                f"| {c['largest_tensor_bytes'] / MB:.0f} MiB | {kind} | {_range(t, 1000)} | "
                f"{c['targets_bytes'] / t['median'] / GB:.2f} | "
                f"{rss['median'] / MB:.1f} MiB (max {rss['max'] / MB:.1f}) | "
                f"{rss['median'] / c['largest_tensor_bytes']:.2f}x | {share} |"
            )
    cold = cases.get("x1", {}).get("kinds", {}).get("coldstart")
    if cold:
        lines += [
            "",
            "### Cold start: what a fresh process pays before the first byte",
            "",
            "Each step timed in the order a first load meets it (median and range over the "
            "fresh processes, 200 MB checkpoint); then a load with those costs paid.",
            "",
            "| step | milliseconds |",
            "| --- | ---: |",
        ]
        for step, f in cold["steps_s"].items():
            lines.append(f"| {step} | {_range(f, 1000, '')} |")
        lines.append(f"| the load after them | {_range(cold['warm_load_s'], 1000, '')} |")
    notes = r.get("cold_start_notes", [])
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return lines


def write_markdown(results: dict[str, Any], json_path: Path, chart: Path) -> Path:
    """docs/performance.md from this run's figures (regenerated, never hand-edited); the
    sections this run does not write (those the series run alone write: verify, decoders,
    kept without its PaddleFormers models, ...) stay as they were (:func:`keep_sections`)."""
    r = results
    lines = [
        "# Performance",
        "",
        f"Generated by `nox -s bench` (`python bench/run.py`) on {r['date']}, "
        f"{r['machine']['cpus']} CPUs, Python {r['machine']['python']}, "
        f"Paddle {r['machine']['paddle']}, torch {r['machine'].get('torch') or 'not installed'}. "
        f"Whole run: {r['run_seconds']:.0f} s. Figures: "
        f"[`{json_path.relative_to(ROOT)}`](../{json_path.relative_to(ROOT)}). Every comparison "
        "runs its contenders in alternating rounds and quotes medians (and ranges); ratios "
        "are of medians from the same run. The defaults are measured one load per fresh "
        "process, as a user runs a load. This is a shared 2-core machine with other jobs "
        "running: expect +-20% and more.",
        "",
        f"![charts]({chart.name})",
        "",
        "## Dequantize throughput vs memcpy (per format, sources in memory, into outputs "
        "written before, as memcpy's destination)",
        "",
        "| package | figure | GB/s | share of memcpy |",
        "| --- | --- | ---: | ---: |",
    ]
    for pkg, figs in r.get("formats", {}).items():
        mem = figs.get("memcpy_gbps", 0.0)
        for k, v in figs.items():
            share = f"{v / mem:.0%}" if mem and "memcpy" not in k else ""
            lines.append(f"| {pkg} | {k} | {v:.2f} | {share} |")
    lines += _fresh_lines(r)
    dcp = r.get("vs_dcp", {})
    if "skipped" in dcp:
        lines += ["", f"torch DCP skipped: {dcp['skipped']}"]
    elif "mxfp4" in dcp:
        mx = dcp["mxfp4"]
        lines += [
            "",
            "## torch DCP on MXFP4 (one process)",
            "",
            f"gpt-oss experts ({mx['experts']} experts of gpt-oss-20b's "
            f"`gate_up_proj` {mx['logical_shapes']['gate_up_proj']} and `down_proj` "
            f"{mx['logical_shapes']['down_proj']}). **DCP correct: {mx['dcp_correct']}.**",
            "",
            "| tensor | share of elements DCP wrote | columns written | written values "
            "equal flexq | mismatches |",
            "| --- | ---: | --- | --- | ---: |",
        ]
        for k, c in mx["checks"].items():
            lines.append(
                f"| {k} | {c['written_fraction']:.2%} | {c['written_columns']} | "
                f"{c['written_values_equal_flexq']} | {c['mismatches']} |"
            )
        lines += [
            "",
            "DCP's reader rewrites the `*_blocks` metadata size to the dequantized 3-D shape "
            "but leaves the storage chunk 4-D; the planner intersects the 3-D request with the "
            "first three dims of the 4-D chunk `[E, out, G, 16]`, so only the first `G` "
            "(= in/32) columns of each row are read and dequantized; the rest of every row "
            "is never written (left as whatever the target held). Timing it next to flexq "
            f"is therefore not a like-for-like figure: DCP {_fmt_s(mx['median_s']['torch_dcp'])}"
            f" (3% of the work) vs flexq {_fmt_s(mx['median_s']['flexq_compose_numpy'])}.",
        ]
    vp = r.get("vs_paddle", {})
    if vp:
        lines += [
            "",
            "## flexq (FP8 checkpoint) vs Paddle's own loader (bf16 twin), one process",
            "",
            f"Checkpoint bytes: FP8 {vp['checkpoint_bytes']['fp8'] / MB:.0f} MiB, "
            f"bf16 {vp['checkpoint_bytes']['bf16'] / MB:.0f} MiB; {vp['rounds']} rounds.",
            "",
            "| contender | median | ratio to Paddle bf16 |",
            "| --- | ---: | ---: |",
        ]
        lines += _median_rows(vp["median_s"], vp["ratio_to_paddle"])
    rk = r.get("ranks", {})
    if rk:
        lines += [
            "",
            "## Bytes read per rank (2 ranks, every linear a Shard(0) target)",
            "",
            f"Checkpoint data files: {rk['checkpoint_file_bytes'] / MB:.1f} MiB. Direct: "
            "flexq's own counter (`LoadReport.bytes_read`). flexcheckpoint: Paddle 3.3.1 reads "
            "every file assigned to a rank whole with `paddle.load`; the worker wraps it and "
            "adds up the tensor bytes it returns (page-cache reads do not show in /proc/self/io).",
            "",
            "| engine | rank 0 | rank 1 | shares of the checkpoint |",
            "| --- | ---: | ---: | --- |",
        ]
        for engine, e in rk["engines"].items():
            per = e["bytes_read_per_rank"]
            shares = ", ".join(f"{s:.1%}" for s in e["share_of_checkpoint"])
            lines.append(f"| {engine} | {per[0] / MB:.1f} MiB | {per[1] / MB:.1f} MiB | {shares} |")
    goals = r.get("goals", {})
    if goals:
        lines += [
            "",
            "## Goals (issue 17: the defaults, block-FP8 into float32)",
            "",
            "| goal | target | measured | met |",
        ]
        lines.append("| --- | --- | --- | --- |")
        for g in goals.values():
            lines.append(f"| {g['goal']} | {g['target']} | {g['measured']} | {g['met']} |")
    if r.get("kept"):
        lines += kept_section(r["kept"])
    if r.get("physical"):
        from bench import physical

        lines += ["", *physical.markdown(r["physical"], str(json_path.relative_to(ROOT)))]
    prof = r.get("profile", {})
    if prof:
        lines += [
            "",
            f"## Where the time goes (pyinstrument, the defaults after one warm-up load in "
            f"the same process, initialised targets, {_fmt_s(prof['seconds_per_load'])} "
            "per load)",
            "",
            "| step | per load | share |",
            "| --- | ---: | ---: |",
        ]
        for k, v in prof["steps_s"].items():
            share = prof["steps_share"].get(k)
            lines.append(f"| {k} | {_fmt_s(v)} | {'' if share is None else f'{share:.0%}'} |")
        lines += ["", f"Full profile: `bench/results/{prof['text']}`."]
    notes = r.get("notes", [])
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    out = ROOT / "docs" / "performance.md"
    before = out.read_text() if out.exists() else ""
    out.write_text("\n".join(lines) + "\n")
    keep_sections(out, before)
    return out


if __name__ == "__main__":
    # ``python -m bench.report bench/results/<date>.json``: the chart and the page again
    # from a run's figures (after a change to this module; the figures stay the run's).
    import sys

    source = Path(sys.argv[1]).resolve()
    figures = json.loads(source.read_text())
    write_markdown(figures, source, write_chart(figures, ROOT / "docs" / "performance.png"))
