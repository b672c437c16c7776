"""The documentation shows the code that actually ships."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "plugins" / "flexq-format-int8row"


def test_plugin_guide_embeds_the_example_package_verbatim() -> None:
    guide = (ROOT / "docs" / "plugin-guide.md").read_text()
    source = (EXAMPLE / "src" / "flexq_int8row" / "__init__.py").read_text().rstrip()
    pyproject = (EXAMPLE / "pyproject.toml").read_text().rstrip()
    assert f"```python\n{source}\n```" in guide
    assert f"```toml\n{pyproject}\n```" in guide


def test_cli_reference_covers_every_subcommand() -> None:
    from flexq.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    commands = set(sub.choices)  # type: ignore[arg-type]
    text = (ROOT / "docs" / "cli.md").read_text()
    assert commands == {"list-formats", "inspect", "convert", "demo", "verify"}
    for command in commands:
        assert f"## `flexq {command}" in text


def test_readme_starts_with_the_two_fresh_machine_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert block[0].startswith("python -m pip install nox && python -m nox -s demo")
    assert block[1].startswith("python -m pip install nox && python -m nox -s tests")


def test_relative_links_in_the_docs_resolve() -> None:
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def regenerate_or_compare(path: Path, text: str) -> None:
    """``FLEXQ_REGENERATE=1`` rewrites a generated page; otherwise it must be current."""
    import os

    if os.environ.get("FLEXQ_REGENERATE"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, f"{path} is stale: rerun with FLEXQ_REGENERATE=1"


def test_published_json_schemas_are_generated_from_the_models() -> None:
    import json

    from flexq.cli.documents import DOCUMENTS, json_schema

    for name in DOCUMENTS:
        regenerate_or_compare(ROOT / "docs" / "schema" / f"{name}.json", json_schema(name))
        assert json.loads(json_schema(name))["title"]


def test_cli_json_documents_validate_against_their_models(tmp_path: Path) -> None:
    import subprocess
    import sys

    import numpy as np

    import flexq
    from flexq.cli.documents import FormatList, InspectDocument

    path = flexq.save_checkpoint(tmp_path / "c", {"w": flexq.RawTensor.of(np.ones(3, np.float32))})

    def cli(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "flexq.cli", *args], capture_output=True, text=True, check=True
        )
        return proc.stdout

    doc = InspectDocument.model_validate_json(cli("inspect", str(path), "--json"))
    assert [t.key for t in doc.tensors] == ["w"]
    rows = FormatList.model_validate_json(cli("list-formats", "--json")).root
    assert {r.name for r in rows} == {r.name for r in flexq.list_formats()}


def test_formats_page_is_generated_from_every_format_package_of_the_repo() -> None:
    import tomllib

    import flexq
    from flexq.cli.documents import formats_page

    rows = flexq.list_formats()
    installed = {r.distribution for r in rows if r.error is None}
    for pyproject in sorted((ROOT / "packages").glob("format-*/pyproject.toml")):
        dist = tomllib.loads(pyproject.read_text())["project"]["name"]
        assert dist in installed, f"pip install -e {pyproject.parent} to generate docs/formats.md"
    regenerate_or_compare(ROOT / "docs" / "formats.md", formats_page(rows))


def _check_pip_install(line: str) -> None:
    """An install line of the guide names paths of this repository and the versions installed."""
    import shlex
    import tomllib
    from importlib.metadata import version

    args = shlex.split(line, comments=True)[2:]
    assert args, line
    for arg in args:
        if "/" in arg:
            pyproject = ROOT / arg.split("[")[0] / "pyproject.toml"
            assert pyproject.is_file(), f"{line}: {arg} is no package of this repository"
            name = tomllib.loads(pyproject.read_text())["project"]["name"]
            assert version(name), f"{line}: {name} is not installed"
        else:
            name, _, wanted = arg.partition("==")
            assert version(name) == wanted, f"{line}: {name} {version(name)} is installed"


def _cache_repos(line: str, cwd: Path, cache: Path) -> None:
    """Put each hub repo id ``line`` names into the offline cache ``cache``, holding the
    tiny FP8 checkpoint ``flexq demo --keep tiny`` wrote (nothing reaches the hub)."""
    import hashlib
    import shlex
    import shutil

    from flexq.io.hub import REPO_ID

    for token in shlex.split(line, comments=True):
        match = REPO_ID.fullmatch(token)
        if match is None or (cwd / token).exists() or "=" in token:
            continue
        tree = cache / f"models--{match['repo'].replace('/', '--')}"
        if tree.exists():
            continue
        commit = hashlib.sha1(match["repo"].encode()).hexdigest()
        snap = tree / "snapshots" / commit
        snap.mkdir(parents=True)
        (tree / "blobs").mkdir()
        (tree / "refs").mkdir()
        (tree / "refs" / "main").write_text(commit)
        for f in sorted((cwd / "tiny" / "fp8").iterdir()):
            sha = hashlib.sha256(f.read_bytes()).hexdigest()
            shutil.copyfile(f, tree / "blobs" / sha)
            (snap / f.name).symlink_to(f"../../blobs/{sha}")


def _check_paddleformers_block(code: str) -> None:
    """A PaddleFormers block names real models, and PaddleFormers pins numpy 1.26.4, so it
    is not run here (``nox -s paddleformers`` loads tiny models of every class through the
    same calls): it compiles and every ``flexq.paddleformers`` name it uses exists."""
    import re

    import flexq.paddleformers

    compile(code, "user-guide.md", "exec")
    used = set(re.findall(r"flexq\.paddleformers\.(\w+)", code))
    assert used, code
    for name in used:
        assert callable(getattr(flexq.paddleformers, name, None)), name


@pytest.mark.multirank
def test_every_code_block_of_the_user_guide_runs(tmp_path: Path) -> None:
    """In order, in one directory: bash lines through bash (pip installs are checked against
    what is installed instead; hub repo ids come from an offline cache), python blocks with
    python (PaddleFormers ones are checked, see below), a block that starts with
    ``# NAME.py`` saved as that file for a later command (two ranks: shard.py)."""
    import os
    import re
    import subprocess
    import sys

    text = (ROOT / "docs" / "user-guide.md").read_text()
    blocks = re.findall(r"```(\w+)\n(.*?)```", text, re.DOTALL)
    assert [lang for lang, _ in blocks].count("python") >= 3
    bindir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
    cache = tmp_path / "hf-cache"
    env |= {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    work = tmp_path / "work"
    work.mkdir()

    def run(cmd: list[str], what: str) -> None:
        proc = subprocess.run(
            cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert proc.returncode == 0, f"{what}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"

    for lang, code in blocks:
        if lang == "python":
            first = code.splitlines()[0]
            saved = re.fullmatch(r"# (\w+\.py)", first)
            if saved:
                (work / saved.group(1)).write_text(code)
            elif "paddleformers" in code:
                _check_paddleformers_block(code)
            else:
                run([sys.executable, "-c", code], code)
        else:
            assert lang == "bash", lang
            for line in code.splitlines():
                if line.startswith("pip install"):
                    _check_pip_install(line)
                elif line.strip():
                    _cache_repos(line, work, cache)
                    run(["bash", "-e", "-c", line], line)
    assert (work / "tiny-awq-plain" / "model.safetensors").is_file()


READMES = [p for p in sorted(ROOT.glob("*/*/README.md")) if "```python" in p.read_text()]


@pytest.mark.parametrize("readme", READMES, ids=lambda p: p.parent.name)
def test_package_readme_code_runs_as_written(readme: Path, tmp_path: Path) -> None:
    """Each package README's python blocks run in a fresh directory (no undefined names)."""
    import re
    import subprocess
    import sys

    for code in re.findall(r"```python\n(.*?)```", readme.read_text(), re.DOTALL):
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, f"{readme}:\n{code}\n{proc.stderr[-3000:]}"


def test_the_plugin_guides_test_examples_pass(tmp_path: Path, int8row: str) -> None:
    """The guide's example tests, run against the guide's example format."""
    import re

    guide = (ROOT / "docs" / "plugin-guide.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", guide, re.DOTALL) if "def test_" in b]
    ran = []
    for code in blocks:
        namespace: dict[str, object] = {}
        exec(compile(code, "plugin-guide.md", "exec"), namespace)
        for name, test in namespace.items():
            if name.startswith("test_") and callable(test):
                test(tmp_path / name)
                ran.append(name)
    assert ran == ["test_matches_reference", "test_a_local_box_is_the_slice_of_the_whole"]


#: Messages a user can get, as the code spells them (each is produced in a test of its own).
TROUBLESHOOTING = [
    "no such directory",
    "is a file; pass the checkpoint directory that holds it",
    "no *.safetensors files",
    "the file changed since it was opened",
    "check the disk and reload the checkpoint",
    "which no installed format provides",
    "is not installed (installed:",
    "orphaned component",
    "looks quantized",
    "names quantization method",
    "none of its tensors",
    "is installed but not in use",
    "is installed but failed to load",
    "expands to nothing",
    "which is no logical",
    "does not match",
    "cannot be loaded into a",
    "cannot transport on this Paddle",
    "needs a Paddle whose load_state_dict has load_transform",
    "unknown engine",
    "DST is the checkpoint itself",
    "DST is inside the checkpoint",
    "DST contains the checkpoint",
    "exists; pass --force to replace it",
    "was not written by flexq convert",
    "DST is a file, not a directory",
    "is a file, so DST cannot be created",
    "interrupted by",
    "not copied (not checkpoint companions)",
    "flexq demo needs PaddlePaddle",
]


@pytest.mark.parametrize("message", TROUBLESHOOTING)
def test_troubleshooting_explains_each_message_the_code_gives(message: str) -> None:
    page = " ".join((ROOT / "docs" / "troubleshooting.md").read_text().split())
    assert message in page
    sources = "\n".join(p.read_text() for p in (ROOT / "packages" / "core" / "src").rglob("*.py"))
    assert message in sources, message


def test_the_scale_page_is_generated_from_the_results_it_names() -> None:
    """docs/scale.md is bench/scale_report.py's rendering of the results file it cites."""
    import json
    import re
    import sys

    sys.path.insert(0, str(ROOT))
    from bench.scale_report import render

    page = ROOT / "docs" / "scale.md"
    found = re.search(r"from bench/results/(\S+\.json);", page.read_text())
    assert found is not None
    results = json.loads((ROOT / "bench" / "results" / found.group(1)).read_text())
    regenerate_or_compare(page, render(results, found.group(1)))
