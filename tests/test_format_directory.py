"""The plugin guide's example, written and installed from the guide's own text, and a new
format as one directory: what it changes outside that directory is generated text only.

The package is built in a temporary directory from docs/plugin-guide.md's blocks (its
pyproject, its module, its conformance class), pip-installed into a directory of its own
(never into the test environment), and then:

- the guide's section 4 runs as written: ``flexq list-formats`` lists it, ``flexq
  inspect`` claims a checkpoint's tensor for it, ``flexq.load_state_dict`` loads it;
- its conformance suite (the guide's three-name ``TestConformance``) passes;
- dropped as ``packages/format-int8row`` into a copy of this repository (a git
  repository of its own), it is found by the workspace's globs and one command
  (``python -m flexq.cli.doc_blocks .``) rewrites exactly the generated files,
  only inside their generated blocks: ``git status`` shows nothing else.

One pip install and a few fresh processes: ~40 s on the shared 2-core machine, as long as
tests/test_plugin_install.py (~34 s) in the same run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import flexq
from flexq.cli.doc_blocks import _BLOCK, FILES
from flexq.cli.published import MODULE
from flexq.plugin.passthrough import looks_quantized
from flexq.testing import FormatConformance

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "plugin-guide.md").read_text()
PACKAGE = "flexq-format-int8row"


def fenced(text: str, language: str) -> list[str]:
    """The bodies of ``text``'s fenced blocks in ``language``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def section(number: int) -> str:
    """Section ``number`` of the guide (``## 4. ...`` up to the next ``## ``)."""
    return GUIDE.split(f"\n## {number}. ", 1)[1].split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guide's package as section 2 lays it out, from the guide's blocks, plus the
    conformance test section 5 gives."""
    package = tmp_path_factory.mktemp("guide") / PACKAGE
    (package / "src" / "flexq_int8row").mkdir(parents=True)
    (package / "tests").mkdir()
    (toml,) = fenced(section(2), "toml")
    module = next(b for b in fenced(section(2), "python") if "plugin = Format(" in b)
    conformance = next(b for b in fenced(section(5), "python") if "(FormatConformance)" in b)
    (package / "pyproject.toml").write_text(toml)
    (package / "src" / "flexq_int8row" / "__init__.py").write_text(module)
    (package / "tests" / "test_int8row_conformance.py").write_text(conformance)
    return package


@pytest.fixture(scope="module")
def site(written: Path) -> Path:
    """The guide's install command, run where section 2 leaves the package; into a
    directory of its own (``--target``; ``--no-deps``: flexq and numpy are here)."""
    (command,) = [
        line.split("#", 1)[0].strip()
        for line in fenced(section(4), "bash")[0].splitlines()
        if line.startswith("pip ")
    ]
    assert command == f"pip install ./{PACKAGE}"
    target = written.parent / "site"
    extra = ["--quiet", "--no-deps", "--target", str(target)]
    subprocess.run([sys.executable, "-m", *shlex.split(command), *extra], cwd=written.parent, check=True)  # fmt: skip
    return target


def run(site: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python *args`` with the installed package importable, no format filter set."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLEXQ_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [environ.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=environ, cwd=cwd, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def checkpoint(directory: Path) -> tuple[Path, np.ndarray]:
    """An int8row checkpoint of one 3 x 4 weight, and its float32 value."""
    q = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    s = np.array([1, 2, 4], np.float32)
    tensors = {"lin.weight_q": flexq.RawTensor.of(q), "lin.weight_qscale": flexq.RawTensor.of(s)}
    return flexq.save_checkpoint(directory, tensors), q.astype(np.float32) * s[:, None]


def test_the_guides_install_and_use_section_runs_as_written(site: Path, tmp_path: Path) -> None:
    path, expected = checkpoint(tmp_path / "int8row-checkpoint")
    commands = [ln for ln in fenced(section(4), "bash")[0].splitlines() if ln.startswith("flexq ")]
    assert [c.split("#")[0].split() for c in commands] == [
        ["flexq", "list-formats"],
        ["flexq", "inspect", "/path/to/int8row-checkpoint"],
    ]
    # list-formats: the row the guide's comment shows, its words in its order
    shown = commands[0].split("#", 1)[1].split("...")[0].split()
    listed = run(site, "-m", "flexq.cli", "list-formats").stdout
    (row,) = [ln.split() for ln in listed.splitlines() if ln.split()[:1] == ["int8row"]]
    assert row[: len(shown)] == shown
    assert PACKAGE in row
    report = json.loads(run(site, "-m", "flexq.cli", "inspect", str(path), "--json").stdout)
    assert [(t["key"], t["format"]) for t in report["tensors"]] == [("lin.weight", "int8row")]
    # load_state_dict: the guide's block, over a model whose one parameter is lin.weight
    load = next(b for b in fenced(section(4), "python") if "load_state_dict" in b)
    model = (
        "import numpy as np, paddle\n"
        "class Lin(paddle.nn.Layer):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.weight = self.create_parameter([3, 4])\n"
        "class Model(paddle.nn.Layer):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = Lin()\n"
        "model = Model()\n"
    )
    out = tmp_path / "loaded.npy"
    code = load.replace("/path/to/int8row-checkpoint", str(path))
    run(site, "-c", f"{model}{code}\nnp.save({str(out)!r}, model.lin.weight.numpy())\n")
    np.testing.assert_array_equal(np.load(out).view(np.uint32), expected.view(np.uint32))


def test_the_guides_conformance_class_passes_over_the_installed_package(
    site: Path, written: Path
) -> None:
    checks = sorted(n for n in dir(FormatConformance) if n.startswith("test_"))
    proc = run(site, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=written)
    assert f"{len(checks)} passed" in proc.stdout, proc.stdout[-3000:]


def repository_copy(directory: Path) -> Path:
    """This checkout's tracked files, as they are in the work tree, committed in a git
    repository of their own at ``directory``."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        if (ROOT / name).is_file():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, directory / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run([*git, *args], cwd=directory, check=True)
    return directory


def outside_blocks(text: str) -> str:
    """``text`` with the bodies of its generated blocks left out."""
    return _BLOCK.sub(lambda m: m[1] + m[4], text)


def test_a_new_format_is_one_directory_plus_generated_text(
    site: Path, written: Path, tmp_path: Path
) -> None:
    repo = repository_copy(tmp_path / "repo")
    shutil.copytree(written, repo / "packages" / "format-int8row")
    # the workspace's lists are globs that take the new directory in as it is: pytest's
    # testpaths, ruff's first-party src and the noxfile's members (its install, typecheck
    # and interop sessions)
    config = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]
    new = repo / "packages" / "format-int8row"
    assert any(new / "tests" in repo.glob(p) for p in config["pytest"]["ini_options"]["testpaths"])
    assert any(new / "src" in repo.glob(p) for p in config["ruff"]["src"] if p != ".")
    noxfile = (repo / "noxfile.py").read_text()
    (members,) = re.findall(r'MEMBERS = .*\(ROOT / "packages"\)\.glob\("([^"]+)"\)', noxfile)
    assert new / "pyproject.toml" in (repo / "packages").glob(members)
    run(site, "-m", "flexq.cli.doc_blocks", ".", cwd=repo)
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    generated = {*FILES, "docs/formats.md", str(MODULE)}
    expected = ["?? packages/format-int8row/", *(f" M {name}" for name in generated)]
    assert sorted(status) == sorted(expected), (
        "outside the new directory only the generated files may change (if the checkout's "
        "own are stale, run `python -m flexq.cli.doc_blocks .` from the repository root)"
    )
    for name in FILES:  # only inside their generated blocks
        assert outside_blocks((repo / name).read_text()) == outside_blocks(
            (ROOT / name).read_text()
        )
    namespace: dict[str, object] = {}
    exec(compile((repo / MODULE).read_text(), str(MODULE), "exec"), namespace)
    assert namespace["PUBLISHED"]["int8row"] == (("int8row", PACKAGE),)  # type: ignore[index]
    assert PACKAGE in namespace["DISTRIBUTIONS"]  # type: ignore[operator]
    # its companion names, which no hand-kept rule of the pass-through guard knows
    assert namespace["COMPANIONS"] == {
        "weight_q": f"int8row tensors ({PACKAGE})",
        "weight_qscale": f"int8row tensors ({PACKAGE})",
    }
    # ... so without the format installed its checkpoint is refused, not passed through
    path, _ = checkpoint(tmp_path / "int8row-checkpoint")
    ckpt = flexq.Checkpoint(path)
    companions = namespace["COMPANIONS"]
    assert isinstance(companions, dict)
    for key in ("lin.weight_q", "lin.weight_qscale"):
        assert looks_quantized(key, ckpt.info(key), {}) is None  # the hand-kept rules alone
        assert looks_quantized(key, ckpt.info(key), companions) == f"int8row tensors ({PACKAGE})"
