"""Sessions for the flexq workspace: tests, paddleformers, interop, lint, typecheck, demo,
bench, fuzz.

Every session builds its own virtualenv and installs the workspace members
from packages/ (editable) plus the dependency group it needs from the root
pyproject.toml, so `pip install nox && nox -s <name>` works on a fresh machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
MEMBERS = sorted(str(p.parent) for p in (ROOT / "packages").glob("*/pyproject.toml"))

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True


def install_workspace(session: nox.Session, *groups: str, pins: tuple[str, ...] = ()) -> None:
    """Install every workspace member (editable) and the named dependency groups.

    ``pins`` go into the same resolve, so every other dependency is chosen to fit
    them (installed afterwards, a pin would leave e.g. an ml_dtypes built for
    numpy 2 beside numpy 1.26).
    """
    editable = [arg for m in MEMBERS for arg in ("-e", m)]
    extra = [dep for g in groups for dep in nox.project.dependency_groups(PYPROJECT, g)]
    session.install(*editable, *extra, *pins)


#: numpy versions the suite runs under: the newest, and 1.26.4, which
#: ``pip install paddleformers`` gives (its DLPack arrays are read-only).
NUMPY = ["latest", "1.26.4"]

#: what runs under the newest numpy only: launched ranks and signal storms test process
#: orchestration (launch, signals, teardown), not numpy's semantics; the numerics their
#: workers run are the single-process tests', and PaddleFormers' multi-rank tests run
#: under numpy 1.26.4 in ``paddleformers``. About half the suite's time.
ONCE = "multirank or storm"


@nox.session
@nox.parametrize("numpy", NUMPY)
def tests(session: nox.Session, numpy: str) -> None:
    """The whole test suite (unit, property, plugin-install and multi-rank tests)
    under the newest numpy; under the older numpy of ``NUMPY`` all of it but
    ``ONCE``."""
    install_workspace(session, "test", pins=() if numpy == "latest" else (f"numpy=={numpy}",))
    session.run("python", "-c", "import ml_dtypes, numpy; print('numpy', numpy.__version__)")
    once = () if numpy == "latest" or session.posargs else ("-m", f"not ({ONCE})")
    session.run("pytest", *once, *session.posargs)


@nox.session
def paddleformers(session: nox.Session) -> None:
    """flexq.paddleformers against PaddleFormers' own loads, under the numpy it pins.

    Installs ``paddleformers==1.2.0`` beside the workspace (its dependency
    fast_dataindex pins numpy 1.26.4, whose DLPack imports are read-only) and
    runs tests/paddleformers: tiny models of every supported class, their FP8 /
    AWQ / MXFP4 twins, bf16 and float32, and GGUF files quantized by llama.cpp
    (:func:`install_llama_cpp`). (``tests-1.26.4`` runs the rest of the suite under that
    numpy.)
    """
    install_workspace(session, "test", pins=("paddleformers==1.2.0",))
    install_llama_cpp(session)
    session.run(
        "python", "-c", "import numpy; assert numpy.__version__ == '1.26.4', numpy.__version__"
    )
    session.run("pytest", "tests/paddleformers", *session.posargs)


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
    # Every member's src dir, from packages/* (a new package needs no config line).
    env = {"MYPYPATH": os.pathsep.join(mypy_path())}
    # One run per package: every package's tests have a conftest.py, and mypy
    # refuses two top-level modules of the same name in one run. Positional args
    # (`nox -s typecheck -R -- packages/core`) check only the members named.
    wanted = {str((ROOT / a).resolve()) for a in session.posargs}
    for member in MEMBERS:
        if wanted and str(Path(member).resolve()) not in wanted:
            continue
        # bench/ and interop/: its dequantize bench, its own producers and interop rows
        parts = ("src", "tests", "bench", "interop")
        dirs = [str(Path(member) / d) for d in parts if (Path(member) / d).is_dir()]
        session.run("mypy", *dirs, env=env)
    if not wanted:
        session.run("mypy", "tests", "bench", "noxfile.py", env=env)
        session.run("mypy", "interop", env=env)


def mypy_path() -> list[str]:
    """The src dirs of every workspace member, relative to the root, for ``MYPYPATH``."""
    return [str((Path(m) / "src").relative_to(ROOT)) for m in MEMBERS if (Path(m) / "src").is_dir()]


def install_once(session: nox.Session, *groups: str) -> None:
    """:func:`install_workspace`, skipped when this session's venv already holds the
    workspace as every pyproject.toml now asks: editable installs follow source edits,
    so only a pyproject change needs pip (whose checking alone costs ~36 s)."""
    pyprojects = [ROOT / "pyproject.toml", *sorted(ROOT.glob("packages/*/pyproject.toml"))]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in pyprojects)).hexdigest()
    stamp = Path(str(session.virtualenv.location)) / ".flexq-installed"
    if stamp.is_file() and stamp.read_text() == digest:
        session.log("workspace already installed as the pyproject files ask; not reinstalling")
        return
    install_workspace(session, *groups)
    stamp.write_text(digest)


@nox.session
def demo(session: nox.Session) -> None:
    """The README's main job: `flexq demo`."""
    install_once(session, "demo")
    # Into a file or a pipe, no colour codes from anyone (rich, Paddle's and
    # PaddleFormers' loggers honour NO_COLOR / TERM=dumb).
    plain = {} if sys.stdout.isatty() else {"NO_COLOR": "1", "TERM": "dumb"}
    session.run("flexq", "demo", *session.posargs, env=plain)


@nox.session
def docs(session: nox.Session) -> None:
    """Documentation checks: embedded code matches the shipped code, links resolve."""
    install_workspace(session, "test")
    session.run(
        "pytest",
        "tests/test_docs.py",
        "tests/test_doc_blocks.py",
        # the plugin guide's example, written, installed and run from the guide's text
        "tests/test_format_directory.py",
        "packages/core/tests/test_core_meta.py",
    )


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks; torch (for DCP comparisons) is pip-installed into this session only.

    Writes bench/results/<date>.json, docs/performance.png and docs/performance.md.
    """
    install_workspace(session, "bench")
    # pip, not uv: the CPU wheel; a resolver that prefers the default index pulls CUDA.
    session.run("python", "-m", "pip", "install", "torch==2.13.0")
    # The passthrough series' third contender (CPU reads, framework="paddle").
    session.run("python", "-m", "pip", "install", "fastsafetensors==0.5.0")
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


#: The producer libraries the interop session checks flexq against: versions that
#: install together with torch 2.13.0 (CPU) and keep it. A format package names its own
#: producers in its pyproject (``[tool.flexq.interop] producers = [...]``) and carries
#: their rows in its ``interop/*_schemes.py`` (interop/schemes.py collects them).
PRODUCERS = [
    "llmcompressor==0.14.0.1",
    "compressed-tensors==0.19.0",
    "transformers==5.17.0",
    "auto-round==0.15.1",
    "nvidia-modelopt==0.47.0",
    # and every format package's own: its pyproject's [tool.flexq.interop] producers
    *(
        pin
        for member in MEMBERS
        for pin in nox.project.load_toml(Path(member) / "pyproject.toml")
        .get("tool", {})
        .get("flexq", {})
        .get("interop", {})
        .get("producers", [])
    ),
]
#: GGUF's producer (llama.cpp, vendored); sdist only: pip builds it with cmake + ninja.
LLAMA_CPP = "llama-cpp-python==0.3.36"


def install_llama_cpp(session: nox.Session) -> None:
    """llama.cpp's python binding (its quantizer makes GGUF files), built from the sdist
    for any CPU on first use; pip's wheel cache serves every later install."""
    session.run(
        "python", "-m", "pip", "install", LLAMA_CPP, env={"CMAKE_ARGS": "-DGGML_NATIVE=OFF"}
    )


#: Their own pins would downgrade torch / transformers, and nothing they add is needed.
PRODUCERS_NO_DEPS = ["autoawq==0.2.9", "bitsandbytes==0.50.2"]


@nox.session
def interop(session: nox.Session) -> None:
    """Real producers (llm-compressor, AutoAWQ, auto-round, bitsandbytes, ModelOpt) build tiny
    checkpoints on CPU; flexq must match their own dequantizers bit for bit (interop/)."""
    install_workspace(session, "test")
    pip = ("python", "-m", "pip", "install")
    # torch first and pinned: the CPU wheel; every producer then resolves against it.
    session.run(*pip, "torch==2.13.0")
    session.run(*pip, "torch==2.13.0", *PRODUCERS)
    session.run(*pip, "--no-deps", *PRODUCERS_NO_DEPS)
    # llama.cpp for the GGUF files: built from the sdist (CPU; pip caches the wheel), and
    # the sdist itself, whose vendored convert_hf_to_gguf.py and gguf-py convert models.
    install_llama_cpp(session)
    sdists = Path(session.cache_dir) / "sdists"
    session.run("python", "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                "-d", str(sdists), LLAMA_CPP)  # fmt: skip
    sdist = next(sdists.glob("llama_cpp_python-*.tar.gz"))
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    offline["FLEXQ_LLAMA_CPP_SDIST"] = str(sdist)
    # Quark builds a C++ extension on first use (torch's JIT, seconds). torch leaves its build
    # lock behind when a run is killed mid-build, and every later run sharing the directory
    # (by default one per user, ~/.cache/torch_extensions) then waits on it for ever: so each
    # run builds in a fresh directory of its own.
    extensions = Path(session.create_tmp()) / "torch_extensions"
    shutil.rmtree(extensions, ignore_errors=True)
    offline["TORCH_EXTENSIONS_DIR"] = str(extensions)
    session.run(
        "python",
        "-m",
        "pytest",
        "interop/",
        "-p",
        "no:cacheprovider",
        *session.posargs,
        env=offline,
    )
