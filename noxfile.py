"""Sessions for the flexq workspace: tests, lint, typecheck, demo, bench, fuzz.

Every session builds its own virtualenv and installs the workspace members
from packages/ (editable) plus the dependency group it needs from the root
pyproject.toml, so `pip install nox && nox -s <name>` works on a fresh machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
MEMBERS = sorted(str(p.parent) for p in (ROOT / "packages").glob("*/pyproject.toml"))

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True


def install_workspace(session: nox.Session, *groups: str) -> None:
    """Install every workspace member (editable) and the named dependency groups."""
    editable = [arg for m in MEMBERS for arg in ("-e", m)]
    extra = [dep for g in groups for dep in nox.project.dependency_groups(PYPROJECT, g)]
    session.install(*editable, *extra)


#: numpy versions the suite runs under: the newest, and 1.26.4, which
#: ``pip install paddleformers`` gives (its DLPack arrays are read-only).
NUMPY = ["latest", "1.26.4"]


@nox.session
@nox.parametrize("numpy", NUMPY)
def tests(session: nox.Session, numpy: str) -> None:
    """The whole test suite (unit, property, plugin-install and multi-rank tests),
    under each numpy of ``NUMPY``."""
    install_workspace(session, "test")
    if numpy != "latest":
        session.install(f"numpy=={numpy}")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole tree."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package's sources and tests."""
    install_workspace(session, "typecheck")
    # One run per package: every package's tests have a conftest.py, and mypy
    # refuses two top-level modules of the same name in one run.
    for member in MEMBERS:
        dirs = [str(Path(member) / d) for d in ("src", "tests") if (Path(member) / d).is_dir()]
        session.run("mypy", *dirs)
    session.run("mypy", "tests", "bench", "noxfile.py")


@nox.session
def demo(session: nox.Session) -> None:
    """The README's main job: `flexq demo`."""
    install_workspace(session, "demo")
    session.run("flexq", "demo", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Documentation checks: embedded code matches the shipped code, links resolve."""
    install_workspace(session, "test")
    session.run("pytest", "tests/test_docs.py", "packages/core/tests/test_core_meta.py")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks; torch (for DCP comparisons) is pip-installed into this session only.

    Writes bench/results/<date>.json, docs/performance.png and docs/performance.md.
    """
    install_workspace(session, "bench")
    # pip, not uv: the CPU wheel; a resolver that prefers the default index pulls CUDA.
    session.run("python", "-m", "pip", "install", "torch==2.13.0")
    session.run("python", "bench/run.py", *session.posargs)


@nox.session(default=False)
def fuzz(session: nox.Session) -> None:
    """Long hypothesis run of the reader and every decoder (not a default session).

    ``FLEXQ_FUZZ_EXAMPLES`` (default here 2000 per test) sets the example count.
    """
    install_workspace(session, "test")
    examples = os.environ.get("FLEXQ_FUZZ_EXAMPLES", "2000")
    session.run(
        "pytest",
        "tests/test_reliability_fuzz.py",
        *session.posargs,
        env={"FLEXQ_FUZZ_EXAMPLES": examples},
    )
