"""Plugins under stress: concurrent first loads, wrong-typed hook results, name clashes.

Issue 23's plugin classes beside the catalogue (tests/reliability/catalogue.py
pins each error; these pin what keeps working around it):

- threads making a fresh process's first flexq calls, and several fresh
  processes at once, all load every tensor exactly;
- a format whose hook returns a result of the wrong type is disabled with ONE
  warning naming its distribution and the hook, and every other format loads
  exactly (Python API and CLI);
- a second distribution offering the built-in name ``fp8`` leaves flexq's own
  ``fp8`` in use, with one warning naming both distributions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq.errors import PluginWarning
from flexq.plugin.manager import registry

from .reliability import surgery
from .reliability.catalogue import WRONG_TYPES
from .test_reliability import FAULTY_SRC, _dist, faulty_module, make_targets, site, snapshot

__all__ = ["site"]  # the fixture, shared with tests/test_reliability.py

FIRST_LOADS = Path(__file__).parent / "reliability" / "first_loads.py"


def reference(path: Path) -> dict[str, np.ndarray]:
    """Every logical tensor of ``path`` as float32, loaded once in this process."""
    targets = make_targets(path)
    flexq.load_state_dict(targets, path)
    return {k: v.astype("float32").numpy() for k, v in targets.items()}


def spec_of(path: Path) -> dict[str, Any]:
    entries = flexq.compose(path).entries
    return {"path": str(path), "targets": {k: [list(e.shape), e.dtype] for k, e in entries.items()}}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """One small checkpoint of each of four formats."""
    root = tmp_path_factory.mktemp("formats")
    return [build(root / name) for name, build in sorted(surgery.BUILDERS.items())]


def run_first_loads(out: Path, specs: list[dict[str, Any]]) -> subprocess.Popen[str]:
    out.mkdir()
    spec_file = out / "spec.json"
    spec_file.write_text(json.dumps(specs))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEXQ_")}
    return subprocess.Popen(
        [sys.executable, str(FIRST_LOADS), str(out), str(spec_file)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def assert_exact(out: Path, expected: list[dict[str, np.ndarray]]) -> None:
    errors = {p.name: p.read_text() for p in out.glob("*.err")}
    assert not errors, errors
    for i, want in enumerate(expected):
        with np.load(out / f"{i}.npz") as got:
            assert sorted(got.files) == sorted(want)
            for key, value in want.items():
                np.testing.assert_array_equal(got[key], value, err_msg=f"load {i}: {key}")


def test_concurrent_first_loads_from_threads_load_every_format_exactly(
    tmp_path: Path, checkpoints: list[Path]
) -> None:
    # 12 threads over 4 formats, released together into the process's first flexq call
    # (before the fix, half of them saw a registry with no formats in it yet).
    paths = [checkpoints[i % len(checkpoints)] for i in range(12)]
    proc = run_first_loads(tmp_path / "out", [spec_of(p) for p in paths])
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    refs = {p: reference(p) for p in checkpoints}
    assert_exact(tmp_path / "out", [refs[p] for p in paths])


def test_concurrent_loads_from_fresh_processes_are_exact(
    tmp_path: Path, checkpoints: list[Path]
) -> None:
    procs = []
    for n in range(4):
        specs = [spec_of(checkpoints[n]), spec_of(checkpoints[(n + 1) % len(checkpoints)])]
        procs.append((run_first_loads(tmp_path / f"p{n}", specs), n))
    for proc, n in procs:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output
        want = [reference(checkpoints[n]), reference(checkpoints[(n + 1) % len(checkpoints)])]
        assert_exact(tmp_path / f"p{n}", want)


# -- wrong-typed hook results: that format disabled, the others untouched ----------
def fp8_with_faulty_tensors(path: Path) -> Path:
    """An FP8 checkpoint that also holds the faulty format's tensors, so every hook of
    the faulty format is called on it."""
    surgery.fp8(path)
    tensors = surgery.tensors_of(path)
    tensors.update(surgery.tensors_of(surgery.faulty(path.parent / "faulty")))
    surgery.rewrite(path, tensors)
    return path


@pytest.mark.parametrize("hook", [h for h, _, _ in WRONG_TYPES])
def test_a_wrong_typed_hook_result_disables_only_that_format_with_one_warning(
    hook: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = fp8_with_faulty_tensors(tmp_path / "ckpt")
    # Without the faulty format its tensors pass through as stored; the FP8 ones decode.
    want = reference(ckpt)
    assert flexq.compose(ckpt).entries[surgery.FAULTY_KEYS[0][:-7] + ".fq"].is_passthrough
    name = flexq.register_format(faulty_module(), name="faulty")
    try:
        monkeypatch.setenv(faulty_module().MODE_ENV, f"wrong-type:{hook}")
        loaded = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):  # the second load: no second warning
                targets = make_targets(ckpt)
                flexq.load_state_dict(targets, ckpt)
                loaded.append({k: v.astype("float32").numpy() for k, v in targets.items()})
        plugin_warnings = [str(w.message) for w in caught if w.category is PluginWarning]
        assert len(plugin_warnings) == 1, plugin_warnings
        assert "'faulty'" in plugin_warnings[0]
        assert f"flexq_{hook}" in plugin_warnings[0]
        assert "other formats keep working" in plugin_warnings[0]
        for got in loaded:
            assert sorted(got) == sorted(want)
            for key, value in want.items():
                np.testing.assert_array_equal(got[key], value)
        row = next(r for r in flexq.list_formats() if r.name == "faulty")
        assert row.error is not None
        assert f"flexq_{hook}" in row.error
        assert registry.disabled("faulty")
    finally:
        flexq.unregister_format(name)


def cli(site: Path, *args: str, mode: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEXQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    env[faulty_module().MODE_ENV] = mode
    return subprocess.run(
        [sys.executable, "-m", "flexq.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("hook", ["recognized_keys", "quant_methods"])
def test_cli_convert_warns_once_naming_the_distribution_and_converts_the_rest(
    hook: str, tmp_path: Path, site: Path
) -> None:
    ckpt = surgery.fp8(tmp_path / "ckpt")
    files = snapshot(ckpt)
    proc = cli(site, "convert", str(ckpt), str(tmp_path / "out"), mode=f"wrong-type:{hook}")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "'faulty'" in line]
    assert len(warned) == 1, proc.stderr
    assert warned[0].startswith("flexq: warning: ")
    assert "(flexq-format-faulty)" in warned[0]
    assert f"flexq_{hook}" in warned[0]
    assert snapshot(ckpt) == files
    with flexq.Checkpoint(tmp_path / "out") as out:
        want = reference(ckpt)
        for key, value in want.items():
            np.testing.assert_array_equal(
                flexq.compose(out).load(key, "float32"), value, err_msg=key
            )


# -- a name clash keeps the first-party format -----------------------------------
@pytest.fixture(scope="module")
def clash_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A third-party distribution offering a format named ``fp8`` (the faulty module)."""
    site = tmp_path_factory.mktemp("clash")
    (site / "flexq_faulty.py").write_text(FAULTY_SRC.read_text())
    _dist(site, "evil-fp8", "fp8 = flexq_faulty")
    return site


def test_a_second_distribution_named_fp8_keeps_flexqs_own_and_names_both(
    tmp_path: Path, clash_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = surgery.fp8(tmp_path / "ckpt")
    want = reference(ckpt)
    # First on sys.path, so the impostor is the first entry point found.
    monkeypatch.syspath_prepend(str(clash_site))
    monkeypatch.setattr(registry, "_pm", None)
    monkeypatch.setattr(registry, "_infos", {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = {r.name: r for r in flexq.list_formats()}
    clashes = [str(w.message) for w in caught if w.category is PluginWarning]
    assert len(clashes) == 1, clashes
    assert "flexq-format-fp8" in clashes[0]
    assert "evil-fp8" in clashes[0]
    assert "keeping flexq-format-fp8" in clashes[0]
    assert rows["fp8"].distribution == "flexq-format-fp8"
    assert rows["fp8"].error is None
    targets = make_targets(ckpt)
    flexq.load_state_dict(targets, ckpt)
    for key, value in want.items():
        np.testing.assert_array_equal(targets[key].astype("float32").numpy(), value)


def test_cli_shows_a_name_clash_in_one_line_and_keeps_the_real_fp8(
    tmp_path: Path, clash_site: Path
) -> None:
    ckpt = surgery.fp8(tmp_path / "ckpt")
    proc = cli(clash_site, "list-formats", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["fp8"]["distribution"] == "flexq-format-fp8"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("flexq: warning: ")
    assert "evil-fp8" in lines[0]
    assert "flexq-format-fp8" in lines[0]
    converted = cli(clash_site, "convert", str(ckpt), str(tmp_path / "out"), "--formats", "fp8")
    assert converted.returncode == 0, converted.stderr
    assert "evil-fp8" in converted.stderr  # the clash concerns the format in use
    want = reference(ckpt)
    with flexq.Checkpoint(tmp_path / "out") as out:
        for key, value in want.items():
            np.testing.assert_array_equal(
                flexq.compose(out).load(key, "float32"), value, err_msg=key
            )
