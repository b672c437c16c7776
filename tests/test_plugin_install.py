"""A real plugin distribution, pip-installed from tests/plugins, is discovered through its entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import flexq

PLUGIN = Path(__file__).parent / "plugins" / "flexq-format-int8row"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin installed with pip into a directory of its own."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(PLUGIN),
        ],
        check=True,
    )
    return target


def flexq_cli(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(site), **env}
    for var in ("FLEXQ_FORMATS", "FLEXQ_DISABLED_FORMATS"):
        if var not in env:
            environ.pop(var, None)
    return subprocess.run(
        [sys.executable, "-m", "flexq.cli", *args],
        capture_output=True,
        text=True,
        env=environ,
        check=False,
    )


def listed(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, str]]:
    assert proc.returncode == 0, proc.stderr
    return {r["name"]: r for r in json.loads(proc.stdout)}


def test_installed_plugin_is_listed_with_its_distribution_and_version(site: Path) -> None:
    row = listed(flexq_cli(site, "list-formats", "--json"))["int8row"]
    assert row["version"] == "0.4.0"
    assert row["distribution"] == "flexq-format-int8row"
    assert row["source"] == "entry point"
    assert row["description"].startswith("int8 weights with one float32 scale per row")


def test_block_list_environment_variable_hides_it(site: Path) -> None:
    rows = listed(flexq_cli(site, "list-formats", "--json", FLEXQ_DISABLED_FORMATS="int8row"))
    assert "int8row" not in rows


def test_allow_list_environment_variable_limits_entry_points(site: Path) -> None:
    rows = listed(flexq_cli(site, "list-formats", "--json", FLEXQ_FORMATS="int8row"))
    assert set(rows) == {"int8row"}


def test_installed_plugin_decodes_a_checkpoint(site: Path, tmp_path: Path) -> None:
    q = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    path = flexq.save_checkpoint(
        tmp_path / "c",
        {
            "lin.weight_q": flexq.RawTensor.of(q),
            "lin.weight_qscale": flexq.RawTensor.of(np.array([1, 2, 4], np.float32)),
        },
    )
    report = json.loads(flexq_cli(site, "inspect", str(path), "--json").stdout)
    assert [(t["key"], t["format"]) for t in report["tensors"]] == [("lin.weight", "int8row")]
    code = (
        "import flexq, numpy as np, sys; ct = flexq.compose(sys.argv[1]); "
        "np.save(sys.argv[2], ct.load('lin.weight', 'float32'))"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path / "out.npy")],
        env={**os.environ, "PYTHONPATH": str(site)},
        check=True,
    )
    expected = q.astype(np.float32) * np.array([[1], [2], [4]], np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


def test_broken_entry_point_is_listed_with_its_error_and_others_keep_working(
    site: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken_site"
    dist = broken / "flexq_format_broken-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flexq-format-broken\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text("[flexq]\nbroken = flexq_no_such_module\n")
    pythonpath = os.pathsep.join([str(site), str(broken)])
    proc = flexq_cli(site, "list-formats", "--json", PYTHONPATH=pythonpath)
    rows = listed(proc)
    assert "flexq-format-broken" in (rows["broken"]["error"] or "")
    assert rows["int8row"]["error"] is None
