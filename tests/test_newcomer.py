"""Issue 29: a newcomer's path from the README's first command to their own checkpoint."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flexq_fp8 import save_fp8_checkpoint

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
    assert re.search(r"def demo\(session.*\n.*\n\s+install_once\(session, \"demo\"\)", noxfile)


def test_readme_own_environment_block_installs_paths_of_this_checkout() -> None:
    block = next(b for b in _bash_blocks(README) if b[0].startswith("python -m venv .venv"))
    paths = [w.strip("'").split("[")[0] for line in block for w in line.split() if "packages/" in w]
    assert paths, block
    for path in paths:
        found = sorted(ROOT.glob(path))
        assert found, path
        assert all((p / "pyproject.toml").exists() for p in found), path
    # the glob brings every format package of the workspace (counted from the tree and
    # the installed entry points, not a hand-kept number a new format must edit)
    import tomllib

    import flexq

    dists = {
        tomllib.loads((p / "pyproject.toml").read_text())["project"]["name"]
        for p in ROOT.glob("packages/format-*")
    }
    installed = {f.distribution for f in flexq.list_formats() if f.source == "entry point"}
    assert len(dists) >= 7
    assert dists <= installed


def test_readme_your_own_checkpoint_goes_inspect_verify_convert_load_paddleformers() -> None:
    screen = README.split("## Your own checkpoint", 1)[1].split("\n## ", 1)[0]
    order = [
        "flexq inspect PATH",
        "flexq verify PATH",
        "flexq convert PATH",
        "flexq.paddleformers.",
    ]
    at = [screen.index(step) for step in order]
    assert at == sorted(at)
    assert screen.index("flexq.load_state_dict(") > at[2]
    assert "directory, a Hugging Face cache snapshot or a repo id" in screen


# -- item 2: install hints that work from a checkout, disabled told from missing ----------


def flexq_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLEXQ_")}
    return subprocess.run(
        [sys.executable, "-m", "flexq.cli", *args],
        capture_output=True,
        text=True,
        env={**environ, "COLUMNS": "80", **env},
        timeout=120,
    )


def small_fp8(path: Path) -> Path:
    rng = np.random.default_rng(0)
    return save_fp8_checkpoint(path, {"w": rng.standard_normal((32, 32)).astype(np.float32)})


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"FLEXQ_DISABLED_FORMATS": "fp8"}, "FLEXQ_DISABLED_FORMATS='fp8'"),
        ({"FLEXQ_FORMATS": "int4-awq"}, "FLEXQ_FORMATS='int4-awq'"),
    ],
)
def test_an_fp8_checkpoint_with_fp8_disabled_by_a_variable_says_so_not_install(
    tmp_path: Path, env: dict[str, str], setting: str
) -> None:
    proc = flexq_cli("convert", str(small_fp8(tmp_path / "c")), str(tmp_path / "out"), **env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("flexq: error: ")
    assert f"format 'fp8' (flexq-format-fp8) is installed but disabled by {setting}" in lines[0]
    assert "install flexq-format-fp8" not in lines[0]


def test_a_missing_format_hint_says_how_to_install_it_from_the_checkout() -> None:
    from flexq.plugin.known import PUBLISHED, install_hint

    for pairs in PUBLISHED.values():
        for _, dist in pairs:
            hint = install_hint(dist)
            where = hint.split("pip install -e ", 1)[1].rstrip(")")
            assert (ROOT / where / "pyproject.toml").exists(), hint
            assert f'name = "{dist}"' in (ROOT / where / "pyproject.toml").read_text()


def test_the_remedy_for_an_uninstalled_format_names_the_source_package() -> None:
    from flexq.compose import _remedy
    from flexq.plugin.manager import FormatRegistry

    class Without(FormatRegistry):
        def info(self, name: str) -> None:
            return None

        def excluded_by_env(self, name: str) -> None:
            return None

    text = _remedy("gptq", Without())
    assert text == (
        "install flexq-format-gptq (from a flexq source checkout: "
        "pip install -e packages/format-gptq) for format 'gptq'"
    )


def test_no_hint_names_an_extra_of_a_distribution_not_on_the_index() -> None:
    sources = (ROOT / "packages" / "core" / "src" / "flexq").rglob("*.py")
    for source in sources:
        assert "'flexq[" not in source.read_text(), source


# -- item 3: damaged downloads and wrong files, in plain words ---------------------------


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("flexq: error: "), proc.stderr
    return lines[0]


def test_a_truncated_download_says_truncated_download_again_with_the_full_path(
    tmp_path: Path,
) -> None:
    path = small_fp8(tmp_path / "c")
    data = path / "model.safetensors"
    data.write_bytes(data.read_bytes()[:-100])  # what an interrupted download leaves
    line = one_error_line(flexq_cli("inspect", str(path)))
    assert line.startswith(f"flexq: error: {data}: tensor ")
    assert "the file is truncated" in line
    assert line.endswith("download it again")


def test_a_file_cut_inside_its_header_says_truncated_too(tmp_path: Path) -> None:
    path = small_fp8(tmp_path / "c")
    data = path / "model.safetensors"
    data.write_bytes(data.read_bytes()[:40])
    line = one_error_line(flexq_cli("convert", str(path), str(tmp_path / "out")))
    assert line.startswith(f"flexq: error: {data}: header length ")
    assert line.endswith(
        "the file is truncated (shorter than its header says, e.g. an "
        "interrupted download): download it again"
    )


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "consolidated.pth"])
def test_a_directory_of_pytorch_weights_names_the_file_and_says_safetensors(
    tmp_path: Path, name: str
) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / name).write_bytes(b"PK")
    (tmp_path / "m" / "config.json").write_text("{}")
    line = one_error_line(flexq_cli("inspect", str(tmp_path / "m")))
    assert line.startswith(f"flexq: error: {tmp_path / 'm'}: no *.safetensors files; ")
    assert f"it holds {name}, a PyTorch file: flexq reads only safetensors checkpoints" in line


@pytest.mark.parametrize(
    "qc", [{"quant_method": "awq"}, {"quant_method": "awq", "bits": 4, "group_size": 128}]
)
def test_an_fp8_checkpoint_with_an_awq_config_says_the_config_does_not_match(
    tmp_path: Path, qc: dict[str, object]
) -> None:
    import json

    path = small_fp8(tmp_path / "c")
    (path / "config.json").write_text(json.dumps({"quantization_config": qc}))
    line = one_error_line(flexq_cli("convert", str(path), str(tmp_path / "out")))
    assert f"{path / 'config.json'}: the config does not match the tensors: " in line
    assert "F8_E4M3" in line
    assert "needs 'bits'" not in line
    assert not (tmp_path / "out").exists()


# -- item 3, small items of issue 29's point 10 ------------------------------------------


def test_a_misspelled_nonfinite_scales_setting_is_an_error_naming_the_allowed_values(
    tmp_path: Path,
) -> None:
    path = small_fp8(tmp_path / "c")
    line = one_error_line(
        flexq_cli("convert", str(path), str(tmp_path / "out"), FLEXQ_NONFINITE_SCALES="eror")
    )
    assert "FLEXQ_NONFINITE_SCALES='eror' is not 'warn' or 'error'" in line
    ok = flexq_cli("convert", str(path), str(tmp_path / "ok"), FLEXQ_NONFINITE_SCALES="error")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("size", ["0", "0MB", "0.0001"])
def test_a_zero_max_shard_size_is_refused_before_writing(tmp_path: Path, size: str) -> None:
    path = small_fp8(tmp_path / "c")
    out = tmp_path / "out"
    line = one_error_line(flexq_cli("convert", str(path), str(out), "--max-shard-size", size))
    assert f"size {size!r} is not a positive number of bytes" in line
    assert not out.exists()


def test_path_help_says_directory_cache_snapshot_or_repo_id() -> None:
    for command in ("inspect", "convert"):
        text = flexq_cli(command, "--help", COLUMNS="200").stdout
        assert "directory, HF cache snapshot or repo id" in text, text


def test_debug_keeps_exit_2_for_input_errors_and_adds_the_traceback(tmp_path: Path) -> None:
    proc = flexq_cli("--debug", "inspect", str(tmp_path / "missing"))
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr
    assert "CheckpointError" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("flexq: error: ")


# -- item 10 leftovers: convert into an existing directory, the help footer ----------------


def test_convert_into_a_foreign_dir_says_on_the_first_try_that_force_will_not_help(
    tmp_path: Path,
) -> None:
    path = small_fp8(tmp_path / "c")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("x")
    line = one_error_line(flexq_cli("convert", str(path), str(mine)))  # no --force yet
    assert f"{mine} exists and was not written by flexq convert" in line
    assert "flexq will not replace it, even with --force" in line
    assert line.endswith("choose another DST or empty it yourself")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_convert_into_its_own_earlier_output_says_force_replaces_it(tmp_path: Path) -> None:
    path = small_fp8(tmp_path / "c")
    out = tmp_path / "out"
    assert flexq_cli("convert", str(path), str(out)).returncode == 0
    line = one_error_line(flexq_cli("convert", str(path), str(out)))
    assert f"{out} exists; pass --force to replace it (an earlier flexq convert wrote it" in line
    again = flexq_cli("convert", str(path), str(out), "--force")
    assert again.returncode == 0, again.stderr
    assert f"to {out}" in again.stdout


def test_the_help_footer_names_docs_that_exist_on_this_machine() -> None:
    text = flexq_cli("--help", COLUMNS="200").stdout
    where = text.split("Docs: ", 1)[1].strip()
    assert Path(where).is_absolute()
    assert Path(where).read_text().startswith("# ")


# -- item 9: quiet defaults -----------------------------------------------------------------


def test_an_api_load_prints_nothing_no_ccache_warning_no_engine_info_line(
    tmp_path: Path,
) -> None:
    path = small_fp8(tmp_path / "c")
    script = (
        "import flexq, paddle\n"
        "params = {'w': paddle.zeros([32, 32], dtype='bfloat16')}\n"
        f"flexq.load_state_dict(params, {str(path)!r})\n"
        "print(float(params['w'].astype('float32').abs().sum()) > 0)\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLEXQ_")}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environ, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "True\n"
    assert proc.stderr == ""  # was: Paddle's "No ccache found" and "[INFO] flexq: engine"
