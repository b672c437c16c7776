"""Issue 29: a newcomer's path from the README's first command to their own checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _bash_blocks(text: str) -> list[list[str]]:
    return [b.split("```", 1)[0].splitlines() for b in text.split("```bash\n")[1:]]


def test_readme_block_after_the_demo_puts_the_demo_envs_flexq_on_path() -> None:
    # The first block runs `nox -s demo`; nox puts that session's venv in .nox/demo,
    # whose bin/ holds the `flexq` console script the next blocks call.
    first, second = _bash_blocks(README)[:2]
    assert "nox -s demo" in first[0]
    assert second[0].startswith(". .nox/demo/bin/activate")
    assert second[1] == "flexq --version"
    noxfile = (ROOT / "noxfile.py").read_text()
    assert re.search(r"def demo\(session.*\n.*\n\s+install_workspace\(session", noxfile)


def test_readme_own_environment_block_installs_paths_of_this_checkout() -> None:
    block = next(b for b in _bash_blocks(README) if b[0].startswith("python -m venv .venv"))
    paths = [w.strip("'").split("[")[0] for line in block for w in line.split() if "packages/" in w]
    assert paths, block
    for path in paths:
        found = sorted(ROOT.glob(path))
        assert found and all((p / "pyproject.toml").exists() for p in found), path
    # the glob brings every format package of the workspace
    assert len(sorted(ROOT.glob("packages/format-*"))) == 7


def test_readme_your_own_checkpoint_goes_inspect_verify_convert_load_paddleformers() -> None:
    screen = README.split("## Your own checkpoint", 1)[1].split("\n## ", 1)[0]
    order = ["flexq inspect PATH", "flexq verify PATH", "flexq convert PATH", "flexq.paddleformers."]
    at = [screen.index(step) for step in order]
    assert at == sorted(at)
    assert screen.index("flexq.load_state_dict(") > at[2]
    assert "directory, a Hugging Face cache snapshot or a repo id" in screen
