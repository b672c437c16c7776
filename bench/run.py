"""Run every flexq benchmark once and write the results, the chart and docs/performance.md.

Usage: ``python bench/run.py [--rounds N] [--fresh-rounds N] [--scale-repeats N]
[--verify-rounds N] [--kept-rounds N] [--physical-rounds N]
[scale | verify | formats-memory | kept | physical | decoders | passthrough | discovery]``
(``nox -s bench`` runs it with torch installed for the DCP comparison; without
torch that part is skipped). ``scale`` (``nox -s bench -- scale``) runs only the
multi-rank scale series (:mod:`bench.scale`) and writes its results and
docs/scale.md, leaving docs/performance.md as it is; ``verify`` (``nox -s bench --
verify``) runs only :mod:`bench.verify_cost` and writes its results and the verify
section of docs/performance.md (about a minute, 1 GiB of scratch disk); ``formats-memory``
runs only the format packages' own load-memory cases (:func:`bench.formats.memory_all`: the
GGUF Q4_K_M load of 1 GiB of float32, a 165 MB file) and writes
bench/results/<date>-formats-memory.json; ``kept`` (``nox -s bench -- kept``) runs only the
keep-quantized series (:mod:`bench.kept_load`, with the PaddleFormers Llama of
:mod:`bench.kept_pf` where paddleformers is installed: the bench session does not install
it, so run ``python bench/run.py kept`` with the paddleformers session's interpreter for
that case) and writes bench/results/<date>-kept.json and the kept section of
docs/performance.md; ``physical`` (root: it drops the page cache) runs
only :mod:`bench.physical`, cold and warm default loads against ``dd`` read time and memcpy,
and writes bench/results/<date>-physical.json and its section of docs/performance.md (in a
whole run it fills the main table's physical-limit column); ``decoders`` (``nox -s bench --
decoders``, a few minutes) runs only the format packages' dequantize benches and writes
bench/results/<date>-decoders.json and the decoders section of docs/performance.md (every
format's decode GB/s and share of memcpy, float32 and bfloat16 out, against issue 30's bar;
``decoders --packages format-gptq format-ct-int`` only those packages' benches, into
bench/results/<date>-decoders-partial.json, the docs left as they are);
``passthrough`` and ``discovery`` run only
:mod:`bench.passthrough` (plain bf16 tensors against safetensors' ``safe_open`` and
fastsafetensors, warm and cold page cache) or :mod:`bench.discovery` (a fresh process's
entry points and first compose) and write their results and their section of
docs/performance.md. The defaults a user gets are
measured one load per fresh process (:mod:`bench.fresh`); runs in about 10
minutes on a 2-core machine (the scale series about 10 more) and needs about
2.5 GB of scratch disk (the scale series 2.2 GB more) and 6 GB of memory at its
peak (4 GiB of targets).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# `python bench/run.py` puts bench/ first on the path, where its modules would shadow
# the standard library's; the root instead makes them the `bench` package.
sys.path[0] = str(ROOT)

from bench import (  # noqa: E402
    checkpoints,
    decoders,
    discovery,
    formats,
    fresh,
    hotspots,
    kept_load,
    kept_pf,
    passthrough,
    physical,
    ranks,
    report,
    scale,
    scale_report,
    verify_cost,
    vs_dcp,
    vs_paddle,
)

MB = 1 << 20


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _machine() -> dict[str, Any]:
    import paddle

    info: dict[str, Any] = {
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "paddle": paddle.__version__,
        "torch": None,
    }
    if vs_dcp.torch_available():
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    return info


def _cases(tmp: Path, log: Any) -> dict[str, tuple[Path, int, int, tuple[str, ...]]]:
    """The fresh-process cases, checkpoints written: name -> (dir, linears, side, kinds)."""
    n, side, big = checkpoints.BASE_TENSORS, checkpoints.SIDE, checkpoints.BIG_SIDE
    with_dcp = ("flexq", "dcp", "memcpy") if vs_dcp.torch_available() else ("flexq", "memcpy")
    plan = {
        "x1": (n, side, (*with_dcp, "flexq-fp8-only", "coldstart")),
        "x4": (4 * n, side, ("flexq",)),
        "x16": (16 * n, side, ("flexq",)),
        "1gib": (16, big, with_dcp),
        "4gib": (64, big, ("flexq",)),
    }
    cases = {}
    for name, (count, edge, kinds) in plan.items():
        log(f"writing checkpoint {name}: {count} x {edge}^2 block-FP8")
        path = checkpoints.write_fp8_block(tmp / f"fp8-{name}", count, side=edge)
        cases[name] = (path, count, edge, kinds)
    return cases


def _median(case: dict[str, Any], kind: str, figure: str) -> float:
    return float(case["kinds"][kind][figure]["median"])


def _goals(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The issue's goals for the defaults (block-FP8 into float32), from this run's figures."""
    goals: dict[str, dict[str, Any]] = {}
    cases = r.get("fresh", {}).get("cases", {})
    for name, label in (("x1", "200 MB"), ("1gib", "1 GiB")):
        c = cases.get(name)
        if not c or "dcp" not in c["kinds"]:
            continue
        f, d = c["kinds"]["flexq"]["seconds"], c["kinds"]["dcp"]["seconds"]
        ratio = f["median"] / d["median"]
        rounds = [
            a["seconds"] / b["seconds"]
            for a, b in zip(c["kinds"]["flexq"]["runs"], c["kinds"]["dcp"]["runs"], strict=True)
        ]
        alone = c["kinds"].get("flexq-fp8-only", {}).get("seconds")
        only = (
            f"; with only fp8 discovered (FLEXQ_FORMATS=fp8) {alone['median'] / d['median']:.2f}x"
            if alone
            else ""
        )
        goals[f"time_vs_dcp_{name}"] = {
            "goal": f"default load time / torch DCP time, {label} of targets, fresh processes",
            "target": "<= 0.33x",
            "measured": f"{ratio:.2f}x ({_ms(f['median'])} / {_ms(d['median'])}; flexq "
            f"{_ms(f['min'])}-{_ms(f['max'])}, DCP {_ms(d['min'])}-{_ms(d['max'])}; ratio "
            f"within each round {min(rounds):.2f}-{max(rounds):.2f}x){only}",
            "met": ratio <= 0.33,
        }
    for name, label in (("1gib", "1 GiB"), ("4gib", "4 GiB")):
        c = cases.get(name)
        if not c:
            continue
        rss, largest = c["kinds"]["flexq"]["peak_extra_rss"], c["largest_tensor_bytes"]
        goals[f"memory_{name}"] = {
            "goal": f"peak RSS above the targets (mapped checkpoint pages counted) / largest "
            f"tensor, default load, {label} of targets",
            "target": "<= 1.25x",
            "measured": f"{rss['median'] / MB:.1f} MiB / {largest / MB:.0f} MiB = "
            f"{rss['median'] / largest:.2f}x (max {rss['max'] / largest:.2f}x)",
            "met": rss["max"] <= 1.25 * largest,
        }
    shares = []
    for name, label in (("x1", "200 MB"), ("1gib", "1 GiB")):
        c = cases.get(name)
        if not c:
            continue
        load = c["targets_bytes"] / _median(c, "flexq", "seconds") / 1e9
        copy = c["targets_bytes"] / _median(c, "memcpy", "seconds") / 1e9
        shares.append(f"{label}: {load:.2f} / {copy:.2f} GB/s = {load / copy:.0%}")
        goals.setdefault("bandwidth", {"met": True})["met"] &= load / copy >= 0.25
    if shares:
        goals["bandwidth"] |= {
            "goal": "default load GB/s of float32 output / memcpy GB/s into the same kind of "
            "targets (initialised Paddle float32), fresh processes, same run",
            "target": ">= 25% (issue 8's bar; issue 17 asks for the figure)",
            "measured": "; ".join(shares),
        }
    series = [cases[k] for k in ("x1", "x4", "x16") if k in cases]
    if len(series) == 3:
        gib = [c["targets_bytes"] / (1 << 30) for c in series]
        per_gib = [_median(c, "flexq", "seconds") / g for c, g in zip(series, gib, strict=True)]
        rss = [_median(c, "flexq", "peak_extra_rss") for c in series]
        largest = series[0]["largest_tensor_bytes"]
        # Linear: the cost per GiB does not grow with size (fixed costs make the smaller
        # loads dearer per GiB, never cheaper).
        linear = per_gib[2] <= 1.3 * per_gib[1]
        flat = max(rss) <= 1.25 * largest
        goals["scale"] = {
            "goal": "scale series x1, x4, x16 of the 200 MB checkpoint: seconds per GiB of "
            "targets (linear: x16's at most 1.3x x4's) and peak RSS above targets (flat)",
            "target": "linear, and every peak <= 1.25x the largest tensor",
            "measured": "s/GiB "
            + " / ".join(f"{v:.2f}" for v in per_gib)
            + "; peak "
            + " / ".join(f"{v / MB:.1f}" for v in rss)
            + " MiB",
            "met": linear and flat,
        }
    return goals


def _notes(r: dict[str, Any]) -> list[str]:
    """What this run's figures say about where a fresh process's time goes."""
    x1 = r.get("fresh", {}).get("cases", {}).get("x1", {}).get("kinds", {})
    notes = []
    cold, load = x1.get("coldstart"), x1.get("flexq")
    if cold and load:
        steps = {k: v["median"] for k, v in cold["steps_s"].items() if "caller" not in k}
        paid = sum(steps.values()) - steps.get("import flexq", 0.0)
        notes.append(
            f"At 200 MB the first load's fixed costs (discovery, first compose, pool start: "
            f"{_ms(paid)}) are as large as its decoding (the load after them: "
            f"{_ms(cold['warm_load_s']['median'])}; a fresh default load: "
            f"{_ms(load['seconds']['median'])})."
        )
    alone = x1.get("flexq-fp8-only")
    if alone and load:
        notes.append(
            f"Discovering only fp8 (`FLEXQ_FORMATS=fp8`) the same load takes "
            f"{_ms(alone['seconds']['median'])}: the other {len(r.get('formats', {})) - 1} "
            "installed formats cost the difference: reading their entry points and importing "
            "their plugin objects (their config models, detection and decoders are imported "
            "only when a checkpoint of theirs is composed; fp8's config models are pydantic "
            "models, so pydantic is part of this load's first compose)."
        )
    return notes


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _scale(date: str, repeats: int) -> None:
    """The scale series in its own scratch directory (two ~1 GiB copies), its results
    file and docs/scale.md."""
    with tempfile.TemporaryDirectory(prefix="flexq-bench-scale-") as tmp_name:
        _log("scale series: 1, 2, 4 ranks and 2 nodes x 2 ranks, both engines")
        results = {
            "date": date,
            "machine": _machine(),
            **scale.measure(Path(tmp_name), _log, repeats),
        }
    json_path = report.write_json(results, f"{date}-scale")
    doc = scale_report.write_markdown(results, json_path)
    _log(f"wrote {json_path.relative_to(ROOT)}, {doc.relative_to(ROOT)}")


def _formats_memory(date: str) -> None:
    """The format packages' own load-memory cases (the 1 GiB GGUF Q4_K_M load), one
    fresh process each, and their results file."""
    _log("format packages' load-memory cases (GGUF Q4_K_M, 1 GiB of float32)")
    results: dict[str, Any] = {
        "date": date,
        "machine": _machine(),
        "formats": formats.memory_all(),
    }
    json_path = report.write_json(results, f"{date}-formats-memory")
    _log(f"wrote {json_path.relative_to(ROOT)}")
    for pkg, m in results["formats"].items():
        _log(
            f"{pkg}: peak RSS above targets {m['peak_extra_rss'] / 2**20:.1f} MiB, bound "
            f"{m['bound_bytes'] / 2**20:.1f} MiB, within bound: {m['within_bound']}"
        )


def _verify(date: str, rounds: int) -> None:
    """flexq verify's cost (:mod:`bench.verify_cost`) in its own scratch directory (a
    1 GiB checkpoint), its results file and the verify section of docs/performance.md."""
    with tempfile.TemporaryDirectory(prefix="flexq-bench-verify-") as tmp_name:
        _log("flexq verify on the 1 GiB block-FP8 checkpoint, against a default load")
        figures = verify_cost.measure(Path(tmp_name), rounds)
    goals = verify_cost.goals(figures)
    results = {"date": date, "machine": _machine(), "figures": figures, "goals": goals}
    json_path = report.write_json(results, f"{date}-verify")
    doc = ROOT / "docs" / "performance.md"
    report.replace_section(doc, verify_cost.markdown(figures, str(json_path.relative_to(ROOT))))
    _log(f"wrote {json_path.relative_to(ROOT)}, the verify section of {doc.relative_to(ROOT)}")
    for g in goals.values():
        _log(f"goal {g['goal']}: {g['measured']} (target {g['target']}, met: {g['met']})")


def _kept(date: str, rounds: int) -> None:
    """The keep-quantized series alone (:mod:`bench.kept_load`: the flat cases and the
    PaddleFormers Llama, :mod:`bench.kept_pf`), its results file and the kept section of
    docs/performance.md."""
    _log("keep-quantized load vs bf16 load, fresh processes")
    kept = kept_load.measure(rounds, _log)
    results = {"date": date, "machine": _machine(), "kept": kept}
    json_path = report.write_json(results, f"{date}-kept")
    doc = ROOT / "docs" / "performance.md"
    source = str(json_path.relative_to(ROOT))
    report.replace_section(doc, [*kept_load.markdown(kept, source), ""])
    _log(f"wrote {json_path.relative_to(ROOT)}, the kept section of {doc.relative_to(ROOT)}")


def _decoders(
    date: str,
    figures: dict[str, dict[str, float]] | None = None,
    packages: list[str] | None = None,
) -> None:
    """Every format's decode vs memcpy, float32 and bfloat16 out (:mod:`bench.decoders`):
    measured here unless the full run's ``figures`` are given; its results file
    (measured here) and the decoders section of docs/performance.md. Only ``packages``
    (format package names) when given: then the results file is
    ``<date>-decoders-partial.json`` and docs/performance.md is left as it is (its
    table holds every format)."""
    load = os.getloadavg()[0]
    note = (
        f"One process on this shared machine: load average {load:.1f} on "
        f"{len(os.sched_getaffinity(0))} CPUs when the series started (other jobs running; "
        "a loaded machine lowers every share, memcpy's included, and unevenly)."
    )
    if figures is None:
        _log("format packages' dequantize benches, float32 and bfloat16 out")
        measured = formats.measure_all(packages)
        rows = decoders.table(measured)
        results = {
            "date": date,
            "machine": _machine(),
            "load_average_at_start": load,
            "formats": measured,
            "table": rows,
            "goals": decoders.goals(rows),
        }
        name = f"{date}-decoders" + ("-partial" if packages else "")
        json_name = str(report.write_json(results, name).relative_to(ROOT))
    else:
        rows, json_name = decoders.table(figures), f"bench/results/{date}.json"
    if packages:
        _log(f"wrote {json_name} ({', '.join(packages)} only; docs left as they are)")
    else:
        doc = ROOT / "docs" / "performance.md"
        report.replace_section(doc, decoders.markdown(rows, json_name, note))
        _log(f"wrote {json_name}, the decoders section of {doc.relative_to(ROOT)}")
    for r in rows:
        f32 = r["float32_share"]
        bf16 = r["bfloat16_share"]
        _log(
            f"{r['package']:20s} {r['case']:22s} float32 "
            + (f"{r['float32_gbps']:6.2f} GB/s {f32:4.0%}" if f32 is not None else "-")
            + "  bfloat16 "
            + (f"{r['bfloat16_gbps']:6.2f} GB/s {bf16:4.0%}" if bf16 is not None else "-")
        )
    for g in decoders.goals(rows).values():
        _log(f"goal {g['goal']}: {g['measured']} (target {g['target']}, met: {g['met']})")


def _series(name: str, module: Any, date: str, rounds: int) -> None:
    """A series with its own results file and section of docs/performance.md
    (``passthrough``, ``discovery``, ``physical``: :mod:`bench.passthrough`,
    :mod:`bench.discovery`, :mod:`bench.physical`),
    measured in its own scratch directory."""
    with tempfile.TemporaryDirectory(prefix=f"flexq-bench-{name}-") as tmp_name:
        tmp = Path(tmp_name)
        # Fresh processes get compiled bytecode, as an installed wheel has.
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        figures = module.measure(tmp, rounds, _log)
    goals = module.goals(figures)
    results = {"date": date, "machine": _machine(), "figures": figures, "goals": goals}
    json_path = report.write_json(results, f"{date}-{name}")
    doc = ROOT / "docs" / "performance.md"
    report.replace_section(doc, module.markdown(figures, str(json_path.relative_to(ROOT))))
    _log(f"wrote {json_path.relative_to(ROOT)}, the {name} section of {doc.relative_to(ROOT)}")
    for g in goals.values():
        _log(f"goal {g['goal']}: {g['measured']} (target {g['target']}, met: {g['met']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per comparison")
    parser.add_argument("--fresh-rounds", type=int, default=5, help="fresh processes per case")
    parser.add_argument(
        "--scale-repeats", type=int, default=1, help="launches per config of the scale series"
    )
    parser.add_argument(
        "--kept-rounds",
        type=int,
        default=kept_pf.ROUNDS,
        help="fresh processes per load of the PaddleFormers kept case",
    )
    parser.add_argument(
        "--verify-rounds", type=int, default=verify_cost.ROUNDS, help="rounds of the verify series"
    )
    parser.add_argument(
        "--physical-rounds", type=int, default=5, help="rounds of the physical-limit series"
    )
    parser.add_argument(
        "--packages",
        nargs="+",
        metavar="PACKAGE",
        help="decoders: only these format packages' benches (e.g. format-gptq)",
    )
    parser.add_argument(
        "only",
        nargs="?",
        choices=[
            "scale",
            "verify",
            "formats-memory",
            "kept",
            "physical",
            "decoders",
            "passthrough",
            "discovery",
        ],
        help="run only this series",
    )
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.WARNING)
    _log(f"bytecode written for {fresh.compile_workspace()} workspace files (as installed)")
    started = time.perf_counter()
    date = datetime.date.today().isoformat()
    if args.only == "scale":
        _scale(date, args.scale_repeats)
        return 0
    if args.only == "verify":
        _verify(date, args.verify_rounds)
        return 0
    if args.only == "formats-memory":
        _formats_memory(date)
        return 0
    if args.only == "kept":
        _kept(date, args.kept_rounds)
        return 0
    if args.only == "physical":
        _series("physical", physical, date, args.physical_rounds)
        return 0
    if args.packages and args.only != "decoders":
        parser.error("--packages selects format benches of the decoders series only")
    if args.only == "decoders":
        formats.selected(args.packages)  # unknown names fail before any bench runs
        _decoders(date, packages=args.packages)
        return 0
    if args.only in ("passthrough", "discovery"):
        module = passthrough if args.only == "passthrough" else discovery
        _series(args.only, module, date, args.fresh_rounds)
        return 0
    results: dict[str, Any] = {"date": date, "machine": _machine(), "rounds": args.rounds}
    n = checkpoints.BASE_TENSORS
    with tempfile.TemporaryDirectory(prefix="flexq-bench-") as tmp_name:
        tmp = Path(tmp_name)
        # Fresh processes get compiled bytecode, as an installed wheel has (a session
        # may run with PYTHONDONTWRITEBYTECODE, which would add compile time to imports).
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        _log("format packages' dequantize benches")
        results["formats"] = formats.measure_all()
        cases = _cases(tmp, _log)
        for kind in fresh.KINDS:  # one untimed child of each kind: bytecode compiled
            path, count, edge, _ = next(c for c in cases.values() if kind in c[3])
            fresh.run_child(kind, path, count, edge)
        _log("the defaults, one load per fresh process, alternating with DCP and memcpy")
        results["fresh"] = fresh.measure(cases, args.fresh_rounds, _log)
        fp8 = cases["x1"][0]
        bf16 = checkpoints.write_bf16_twin(fp8, tmp / "bf16")
        if vs_dcp.torch_available():
            _log("torch DCP on MXFP4 gpt-oss experts: correct?")
            mx = checkpoints.write_mxfp4_experts(tmp / "mxfp4")
            results["vs_dcp"] = {"mxfp4": vs_dcp.mxfp4_experts(mx, max(2, args.rounds // 2))}
        else:
            results["vs_dcp"] = {"skipped": "torch is not installed (nox -s bench installs it)"}
        _log("flexq vs Paddle's loader on the bf16 twin")
        results["vs_paddle"] = vs_paddle.compare(fp8, bf16, n, args.rounds)
        _log("bytes read per rank, 2 ranks")
        results["ranks"] = ranks.measure(fp8, n, ["direct", "flexcheckpoint"])
        _log("keep-quantized load vs bf16 load, one fresh process each")
        results["kept"] = kept_load.measure(args.kept_rounds, _log)
        if os.geteuid() == 0:
            _log("the physical limit: cold and warm loads against dd and memcpy")
            results["physical"] = physical.measure(tmp / "physical", args.physical_rounds, _log)
        _log("profile")
        prof_txt = ROOT / "bench" / "results" / f"{date}-profile.txt"
        prof_txt.parent.mkdir(parents=True, exist_ok=True)
        results["profile"] = hotspots.profile(fp8, n, 3, prof_txt)
    _scale(date, args.scale_repeats)
    results["goals"] = _goals(results)
    if "physical" in results:
        results["goals"] |= physical.goals(results["physical"])
    results["notes"] = _notes(results)
    results["run_seconds"] = time.perf_counter() - started
    json_path = report.write_json(results, date)
    chart = report.write_chart(results, ROOT / "docs" / "performance.png")
    doc = report.write_markdown(results, json_path, chart)
    _log(f"wrote {json_path.relative_to(ROOT)}, {chart.relative_to(ROOT)}, {doc.relative_to(ROOT)}")
    for g in results["goals"].values():
        _log(f"goal {g['goal']}: {g['measured']} (target {g['target']}, met: {g['met']})")
    _verify(date, args.verify_rounds)  # after the regenerated doc: its own section
    _decoders(date, results["formats"])  # the same figures, as the per-format table
    _series("passthrough", passthrough, date, args.fresh_rounds)
    _series("discovery", discovery, date, args.fresh_rounds)
    _formats_memory(date)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
