"""The reliability catalogue: every bad input and fault gets flexq's own error, and nothing is lost.

Each case of tests/reliability/catalogue.py runs through the Python API
(``flexq.compose`` and ``flexq.load_state_dict``) and through the CLI
(``flexq inspect`` / ``flexq convert``), and must give: the exception type the
catalogue names with a message naming the file / tensor / format / plugin; exit
code 2 with exactly one stderr line and no traceback; every target bit-identical
afterwards, with the default load and with one row per piece (and on the engines a
case names); the checkpoint directory unchanged (names, sizes, mtimes); and, for
failures found before data is read, a small bounded allocation peak.
docs/reliability.md lists the same cases.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tracemalloc
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import paddle
import pytest

import flexq
from flexq.errors import ScaleWarning
from flexq.formatkit import NONFINITE_SCALES_ENV
from flexq.load.engine import DEFAULT_MAX_INFLIGHT
from flexq.plugin.manager import registry

from .conftest import import_source
from .reliability import surgery
from .reliability.catalogue import CASES, Case

HERE = Path(__file__).parent
FAULTY_SRC = HERE / "reliability" / "flexq_faulty.py"
DOC = HERE.parent / "docs" / "reliability.md"
#: Peak Python allocation allowed while opening a damaged tiny checkpoint: far
#: below anything sized by a hostile number (2^40) from the file.
OPEN_PEAK_BYTES = 4_000_000


def faulty_module() -> ModuleType:
    return import_source("flexq_faulty", FAULTY_SRC)


def _dist(site: Path, dist: str, entry_points: str) -> None:
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[flexq]\n{entry_points}\n")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Installed-looking plugin distributions: the faulty format and a broken entry point."""
    site = tmp_path_factory.mktemp("site")
    (site / "flexq_faulty.py").write_text(FAULTY_SRC.read_text())
    _dist(site, "flexq-format-faulty", "faulty = flexq_faulty")
    _dist(site, "flexq-format-broken", "broken = flexq_no_such_module")
    return site


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Names, sizes and mtimes of everything in ``directory`` (symlinks not followed)."""
    return {
        str(p.relative_to(directory)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
    }


def build(case: Case, tmp_path: Path) -> Path:
    base = case.base.removesuffix("-faulty")
    path = tmp_path / "ckpt"
    if base == "fp8-sharded":
        return surgery.fp8(path, sharded=True)
    if base == "faulty":
        return surgery.faulty(path)
    return surgery.CATALOGUE_BUILDERS[base](path)


def uses_plugins(case: Case) -> bool:
    return "faulty" in case.base or case.formats == ("broken",)


def formats_of(case: Case) -> list[str] | None:
    return list(case.formats) if case.formats else None


@contextlib.contextmanager
def plugins(case: Case, site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The faulty format registered at run time, or entry points rediscovered with ``site``."""
    if case.formats == ("broken",):
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setattr(registry, "_pm", None)
        monkeypatch.setattr(registry, "_infos", {})
        yield
        return
    if "faulty" not in case.base:
        yield
        return
    name = flexq.register_format(faulty_module(), name="faulty")
    try:
        yield
    finally:
        flexq.unregister_format(name)


def make_targets(ckpt: Path) -> dict[str, Any]:
    """A target per logical tensor of the (still valid) checkpoint, filled with random bits."""
    rng = np.random.default_rng(1)
    targets = {}
    for key, entry in flexq.compose(ckpt).entries.items():
        values = rng.standard_normal(entry.shape).astype(np.float32)
        targets[key] = paddle.to_tensor(values).astype(entry.dtype)
    return targets


def bits(targets: dict[str, Any]) -> dict[str, bytes]:
    return {
        k: (v.numpy() if isinstance(v, paddle.Tensor) else np.asarray(v)).tobytes()
        for k, v in targets.items()
    }


def assert_names(message: str, case: Case) -> None:
    missing = [n for n in case.names if n not in message]
    assert not missing, f"{case.id}: {missing} not in message: {message}"


@contextlib.contextmanager
def escalated(case: Case) -> Iterator[None]:
    with warnings.catch_warnings():
        if case.escalate:
            warnings.simplefilter("error", ScaleWarning)
        yield


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_python_api_raises_flexqs_error_and_changes_nothing(
    case: Case, tmp_path: Path, site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = build(case, tmp_path)
    with plugins(case, site, monkeypatch):
        targets = make_targets(ckpt)
        if case.retarget:
            case.retarget(targets)
        if case.damage:
            case.damage(ckpt)
        if case.mode:
            monkeypatch.setenv(faulty_module().MODE_ENV, case.mode)
        before, files = bits(targets), snapshot(ckpt)
        if case.stage == "open":
            flexq.list_formats()  # entry points load before the measurement
            tracemalloc.start()
            try:
                with pytest.raises(case.error) as opened:
                    flexq.compose(ckpt, formats_of(case))
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert_names(str(opened.value), case)
            assert peak < OPEN_PEAK_BYTES
        aoa = {"aoa_statements": list(case.aoa)} if case.aoa else None
        for load in loads(case):
            if "faulty" in case.base and registry.disabled("faulty"):
                # A wrong-typed result disables the format for the process: the next load
                # starts from one registered afresh (before its fault is switched on, as
                # ``plugins`` does), as a new process would.
                flexq.unregister_format("faulty")
                monkeypatch.delenv(faulty_module().MODE_ENV)
                flexq.register_format(faulty_module(), name="faulty")
                monkeypatch.setenv(faulty_module().MODE_ENV, case.mode)
            with escalated(case), pytest.raises(case.error) as loaded:
                flexq.load_state_dict(
                    targets, ckpt, formats=formats_of(case), aoa_config=aoa, **load
                )
            assert_names(str(loaded.value), case)
            assert bits(targets) == before, load
            assert snapshot(ckpt) == files


def loads(case: Case) -> list[dict[str, Any]]:
    """The loads every case fails without a trace: the DEFAULT load (whole tensors) and one
    row per piece (``max_inflight_bytes=1``), on the engines the case names too."""
    atomic = {"atomic": True} if case.atomic else {}
    return [
        {"max_inflight_bytes": size, "engine": engine, **atomic}
        for engine in ("auto", *case.engines)
        for size in (DEFAULT_MAX_INFLIGHT, 1)
    ]


def convert_available() -> bool:
    from flexq.cli.main import build_parser

    sub = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return bool(sub) and "convert" in sub[0].choices


NEEDS_CONVERT = pytest.mark.skipif(
    not convert_available(), reason="`flexq convert` has not landed yet"
)


def cli(
    case: Case, site: Path, *args: str, strict: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEXQ_")}
    if uses_plugins(case):
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
        env[faulty_module().MODE_ENV] = case.mode
    if strict:
        env[NONFINITE_SCALES_ENV] = "error"
    formats = ["--formats", ",".join(case.formats)] if case.formats else []
    return subprocess.run(
        [sys.executable, "-m", "flexq.cli", *args, *formats],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


#: The plugin site holds a format that fails to import; the CLI says so in one warning line
#: whenever every installed format is in use (no --formats).
BROKEN_WARNING = "flexq: warning: format 'broken' from flexq-format-broken: entry point"


def assert_one_line_exit_2(proc: subprocess.CompletedProcess[str], case: Case) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    if uses_plugins(case) and not case.formats:
        assert lines[0].startswith(BROKEN_WARNING), proc.stderr
        lines = lines[1:]
    assert len(lines) == 1, proc.stderr
    return lines[0]


CLI_CASES = [c for c in CASES if c.stage != "target"]
OPEN_CASES = [c for c in CASES if c.stage == "open"]


@pytest.mark.parametrize("case", OPEN_CASES, ids=lambda c: c.id)
def test_cli_inspect_exits_2_with_one_line(case: Case, tmp_path: Path, site: Path) -> None:
    ckpt = build(case, tmp_path)
    if case.damage:
        case.damage(ckpt)
    files = snapshot(ckpt)
    proc = cli(case, site, "inspect", str(ckpt), "--json")
    line = assert_one_line_exit_2(proc, case)
    # inspect reports problems (orphans) in its JSON and counts them on stderr.
    assert_names(line + proc.stdout, case)
    assert snapshot(ckpt) == files


@NEEDS_CONVERT
@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.id)
def test_cli_convert_exits_2_with_one_line(case: Case, tmp_path: Path, site: Path) -> None:
    ckpt = build(case, tmp_path)
    if case.damage:
        case.damage(ckpt)
    files = snapshot(ckpt)
    out = tmp_path / "out"
    proc = cli(case, site, "convert", str(ckpt), str(out), strict=case.escalate)
    line = assert_one_line_exit_2(proc, case)
    assert line.startswith("flexq: error: ")
    assert_names(line, case)
    if case.id.startswith(("plugin-raises", "plugin-wrong", "plugin-returns", "plugin-plan")):
        assert "(flexq-format-faulty)" in line  # the entry point's distribution
    assert snapshot(ckpt) == files
    assert not out.exists() or not any(out.iterdir()), "a failed convert left output behind"


# -- the behaviours around the catalogue ------------------------------------------
SCALE_CASES = [c for c in CASES if c.error is ScaleWarning]


@pytest.mark.parametrize("case", SCALE_CASES, ids=lambda c: c.id)
def test_non_finite_scales_decode_per_spec_with_a_warning_by_default(
    case: Case, tmp_path: Path
) -> None:
    ckpt = build(case, tmp_path)
    targets = make_targets(ckpt)
    assert case.damage is not None
    case.damage(ckpt)
    with pytest.warns(ScaleWarning) as record:
        flexq.load_state_dict(targets, ckpt)
    assert_names(str(record[0].message), case)
    loaded = {k: v.astype("float32").numpy() for k, v in targets.items()}
    if case.scaled:
        # A global scale scales every block of its tensor, as the definition says: a zero
        # divisor makes them non-finite, an infinite one zero; the other tensors are fine.
        assert all(np.isfinite(v).all() for k, v in loaded.items() if k != case.scaled)
        return
    assert any(not np.isfinite(v).all() for v in loaded.values())
    # Only the blocks the bad scale multiplies are non-finite.
    assert all(np.isfinite(v).mean() >= 0.8 for v in loaded.values())


def test_zero_and_negative_scales_decode_exactly_without_a_warning(tmp_path: Path) -> None:
    ckpt = surgery.fp8(tmp_path / "ckpt")
    key = surgery.FP8_KEYS[1] + "_scale_inv"
    surgery.set_values(ckpt, key, (0, 0), 0.0)
    surgery.set_values(ckpt, key, (1, 1), -0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScaleWarning)
        w = flexq.compose(ckpt).load(surgery.FP8_KEYS[1], "float32")
    assert not w[:32, :32].any()
    codes = flexq.Checkpoint(ckpt).read(surgery.FP8_KEYS[1], (32, 32), (32, 32))
    from flexq.formatkit import E4M3_TO_FLOAT32

    np.testing.assert_array_equal(w[32:64, 32:64], E4M3_TO_FLOAT32[codes] * np.float32(-0.5))


def test_broken_entry_point_does_not_stop_the_other_formats(
    tmp_path: Path, site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = surgery.fp8(tmp_path / "ckpt")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_pm", None)
    monkeypatch.setattr(registry, "_infos", {})
    rows = {r.name: r for r in flexq.list_formats()}
    assert "flexq-format-broken" in (rows["broken"].error or "")
    targets = make_targets(ckpt)
    flexq.load_state_dict(targets, ckpt)
    assert all(np.isfinite(v.astype("float32").numpy()).all() for v in targets.values())


@NEEDS_CONVERT
def test_cli_convert_warns_in_one_line_and_keeps_going_on_a_nan_scale(
    tmp_path: Path, site: Path
) -> None:
    case = SCALE_CASES[0]
    ckpt = build(case, tmp_path)
    assert case.damage is not None
    case.damage(ckpt)
    proc = cli(case, site, "convert", str(ckpt), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert_names(proc.stderr, case)


@NEEDS_CONVERT
def test_cli_prints_a_scale_warning_as_one_line(tmp_path: Path, site: Path) -> None:
    case = SCALE_CASES[0]
    ckpt = build(case, tmp_path)
    assert case.damage is not None
    case.damage(ckpt)
    proc = cli(case, site, "convert", str(ckpt), str(tmp_path / "out"))
    lines = proc.stderr.strip().splitlines()
    warned = [line for line in lines if "ScaleWarning" in line or "non-finite" in line]
    assert len(warned) == 1
    assert warned[0].startswith("flexq: warning: ")


def test_the_catalogue_is_big_enough_and_covers_every_group() -> None:
    assert len(CASES) >= 30
    assert {c.group for c in CASES} == {"file", "format", "plugin", "target"}


def test_docs_list_every_case_with_its_error() -> None:
    text = DOC.read_text()
    rows = dict(re.findall(r"^\| `([a-z0-9_-]+)` \| `(\w+)` \|", text, flags=re.M))
    assert rows == {c.id: c.error.__name__ for c in CASES}
