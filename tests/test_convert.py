"""flexq convert: bit-identical to load_state_dict, plain safetensors output, atomic DST."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import paddle
import pytest
from safetensors.paddle import load_file

import flexq
from flexq.cli.convert import MARKER, convert

from .conftest import NORM


def flexq_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flexq.cli", *args], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_convert_is_bit_identical_to_load_state_dict(
    format_ckpt: tuple[str, Path], tmp_path: Path, dtype: str
) -> None:
    name, ckpt = format_ckpt
    out = tmp_path / "out"
    report = convert(ckpt, out, dtype=dtype, formats=[name], max_shard_bytes=40_000)
    assert report.shards > 1
    loaded = {}
    for i in range(1, report.shards + 1):
        loaded.update(load_file(str(out / f"model-{i:05d}-of-{report.shards:05d}.safetensors")))
    ct = flexq.compose(ckpt, [name])
    assert set(loaded) == set(ct.entries)
    targets = {k: paddle.zeros(list(e.shape), dtype=dtype) for k, e in ct.entries.items()}
    flexq.load_state_dict(
        targets,
        ckpt,
        formats=[name],
        aoa_config={"aoa_statements": [f"{NORM} -> {NORM}, dtype='{dtype}'"]},
    )
    for key, t in targets.items():
        assert str(loaded[key].dtype) == str(t.dtype)
        np.testing.assert_array_equal(loaded[key].numpy(), t.numpy(), err_msg=key)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(ct.entries)


def test_config_loses_its_quantization_section_and_small_files_are_copied(
    format_ckpt: tuple[str, Path], tmp_path: Path
) -> None:
    name, ckpt = format_ckpt
    (ckpt / "tokenizer.json").write_text('{"vocab": {}}')
    proc = flexq_cli("convert", str(ckpt), str(tmp_path / "out"), "--formats", name)
    if name == "int8row":  # the example format is registered at run time only
        assert proc.returncode == 2
        assert "not installed" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "quantization_config" not in config
    assert (tmp_path / "out" / "tokenizer.json").read_text() == '{"vocab": {}}'
    assert proc.stdout.startswith("wrote 7 tensors")


def test_existing_dst_needs_force_and_a_marker(
    format_ckpt: tuple[str, Path], tmp_path: Path
) -> None:
    name, ckpt = format_ckpt
    out = tmp_path / "out"
    convert(ckpt, out, formats=[name])
    assert (out / MARKER).is_file()
    (out / "stale").write_text("x")
    with pytest.raises(flexq.FlexqError, match="exists; pass --force"):
        convert(ckpt, out, formats=[name])
    assert (out / "stale").read_text() == "x"
    convert(ckpt, out, formats=[name], force=True)  # an earlier output: replaced
    assert not (out / "stale").exists()
    assert (out / "model.safetensors").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_force_never_replaces_a_directory_convert_did_not_write(
    format_ckpt: tuple[str, Path], tmp_path: Path
) -> None:
    name, ckpt = format_ckpt
    out = tmp_path / "mine"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(flexq.FlexqError, match="was not written by flexq convert"):
        convert(ckpt, out, formats=[name], force=True)
    assert sorted(os.listdir(out)) == ["keep"]


def test_an_empty_dst_is_used_without_force(format_ckpt: tuple[str, Path], tmp_path: Path) -> None:
    name, ckpt = format_ckpt
    (tmp_path / "empty").mkdir()
    convert(ckpt, tmp_path / "empty", formats=[name])
    assert (tmp_path / "empty" / "model.safetensors").exists()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (".", "DST is the checkpoint itself"),
        ("plain", "DST is inside the checkpoint"),
        ("sub/plain", "DST is inside the checkpoint"),
        ("..", "DST contains the checkpoint"),
        ("../..", "DST contains the checkpoint"),
    ],
)
@pytest.mark.parametrize("force", [False, True])
def test_a_dst_that_is_holds_or_lies_inside_src_is_refused(
    tmp_path: Path, where: str, message: str, force: bool
) -> None:
    ckpt = plain_ckpt(tmp_path / "a" / "src")
    (tmp_path / "a" / "neighbour.txt").write_text("unrelated")
    before = _tree(tmp_path)
    with pytest.raises(flexq.FlexqError, match=message):
        convert(ckpt, ckpt / where, force=force)
    assert _tree(tmp_path) == before


def plain_ckpt(path: Path) -> Path:
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    return flexq.save_checkpoint(path, {"w": flexq.RawTensor.of(values)}, config={"a": 1})


def test_convert_src_parent_of_src_force_refuses_and_leaves_everything(tmp_path: Path) -> None:
    """The reported case: `flexq convert SRC PARENT_OF_SRC --force` deleted SRC and a neighbour."""
    ckpt = plain_ckpt(tmp_path / "src")
    (tmp_path / "neighbour.txt").write_text("unrelated")
    before = _tree(tmp_path)
    proc = flexq_cli("convert", str(ckpt), str(tmp_path), "--force")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "DST contains the checkpoint" in proc.stderr
    assert _tree(ckpt.parent) == before


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.safetensors").write_bytes(b"\xff" * 16)
    proc = flexq_cli("convert", str(tmp_path / "src"), str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "model.safetensors" in proc.stderr
    assert not (tmp_path / "out").exists()


def many_small_tensors(tmp_path: Path, seed: int) -> tuple[Path, dict[str, flexq.RawTensor]]:
    """A checkpoint ``tmp_path/src`` of 400 random float32 64x64 tensors (16 KiB each, so a
    20KB shard limit writes one shard a tensor: a convert slow enough to interrupt)."""
    rng = np.random.default_rng(seed)
    many = {
        f"t{i:03d}": flexq.RawTensor.of(rng.standard_normal((64, 64)).astype(np.float32))
        for i in range(400)
    }
    return flexq.save_checkpoint(tmp_path / "src", many), many


def three_shards_written(
    proc: subprocess.Popen[str] | subprocess.Popen[bytes], tmp_path: Path
) -> list[Path]:
    """Wait (60 s at most) until the convert ``proc`` into ``tmp_path/out`` has written three
    shards to its temporary directory or has ended; the temporary directories seen last."""
    deadline = time.monotonic() + 60
    tmp_dirs: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        tmp_dirs = list(tmp_path.glob(".out.flexq-tmp-*"))
        if tmp_dirs and len(list(tmp_dirs[0].glob("*.safetensors"))) >= 3:
            break
        time.sleep(0.01)
    return tmp_dirs


def test_a_killed_convert_leaves_no_dst_and_the_next_one_cleans_up(tmp_path: Path) -> None:
    src, many = many_small_tensors(tmp_path, 1)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "flexq.cli", "convert", str(src), str(out)]
    proc = subprocess.Popen(
        [*cmd, "--max-shard-size", "20KB"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    tmp_dirs = three_shards_written(proc, tmp_path)
    assert proc.poll() is None, "convert finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    assert tmp_dirs
    report = convert(src, out, dtype="float32", max_shard_bytes=20_000)
    assert not list(tmp_path.glob(".out.flexq-tmp-*"))
    assert report.shards == 400
    first = load_file(str(out / "model-00001-of-00400.safetensors"))
    np.testing.assert_array_equal(first["t000"].numpy(), many["t000"].data)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_sigint_and_sigterm_print_one_line_remove_the_temp_directory_and_exit(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    src, _ = many_small_tensors(tmp_path, 2)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "flexq.cli", "convert", str(src), str(out)]
    proc = subprocess.Popen([*cmd, "--max-shard-size", "20KB"], stderr=subprocess.PIPE, text=True)
    three_shards_written(proc, tmp_path)
    assert proc.poll() is None, "convert finished before it could be interrupted"
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert err.splitlines() == [f"flexq: interrupted by {sig.name}; the partial output was removed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_only_checkpoint_companions_are_copied(tmp_path: Path) -> None:
    src = plain_ckpt(tmp_path / "src")
    companions = [
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "chat_template.jinja",
        "vocab.json",
        "merges.txt",
        "LICENSE",
    ]
    others = ["pytorch_model.bin", "model.pt", "README.md", "training_args.bin"]
    for name in companions + others:
        (src / name).write_bytes(name.encode())
    (src / "original").mkdir()
    (src / "original" / "consolidated.00.pth").write_bytes(b"weights")
    report = convert(src, tmp_path / "out")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MARKER, "config.json", "model.safetensors", *companions]
    )
    for name in companions:
        assert (out / name).read_bytes() == name.encode()
    assert sorted(report.skipped) == sorted(others)


def test_output_files_get_the_umasks_permissions(tmp_path: Path) -> None:
    src = plain_ckpt(tmp_path / "src")
    (src / "tokenizer.json").write_text("{}")
    old = os.umask(0o027)
    try:
        convert(src, tmp_path / "out", max_shard_bytes=20)
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out").iterdir()}
    assert set(modes.values()) == {0o640}, modes


def test_float_tensors_keep_their_own_dtype_unless_dtype_is_given(tmp_path: Path) -> None:
    values = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    src = flexq.save_checkpoint(
        tmp_path / "src",
        {
            "h": flexq.RawTensor.of(values.astype(np.float16)),
            "f": flexq.RawTensor.of(values),
            "i": flexq.RawTensor.of(np.arange(4, dtype=np.int32)),
        },
        config={"torch_dtype": "float16"},
    )
    convert(src, tmp_path / "own")
    own = load_file(str(tmp_path / "own" / "model.safetensors"))
    assert {k: str(v.dtype) for k, v in own.items()} == {
        "h": "paddle.float16",
        "f": "paddle.float32",
        "i": "paddle.int32",
    }
    assert json.loads((tmp_path / "own" / "config.json").read_text())["torch_dtype"] == "float16"
    convert(src, tmp_path / "bf16", dtype="bfloat16")
    bf16 = load_file(str(tmp_path / "bf16" / "model.safetensors"))
    assert {str(v.dtype) for k, v in bf16.items() if k != "i"} == {"paddle.bfloat16"}
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["torch_dtype"] == "bfloat16"


def test_awq_converts_to_float16_by_default(tmp_path: Path) -> None:
    if flexq.plugin.manager.registry.info("int4-awq") is None:
        pytest.fail(
            "flexq-format-int4-awq is not installed (pip install -e packages/format-int4-awq)"
        )
    from flexq.cli.demo import hf_weights

    linear, other = hf_weights()
    src = tmp_path / "awq"
    src.mkdir()
    flexq.plugin.manager.registry.encode(
        "int4-awq", src, linear, {k: flexq.RawTensor.of(v) for k, v in other.items()}
    )
    convert(src, tmp_path / "out")
    out = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert str(out["model.layers.0.mlp.down_proj.weight"].dtype) == "paddle.float16"


def test_an_old_output_moved_aside_by_a_killed_convert_is_put_back(tmp_path: Path) -> None:
    from flexq.cli.convert import _remove_stale

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    src = plain_ckpt(tmp_path / "src")
    out = tmp_path / "out"
    convert(src, out)
    old = tmp_path / f".out.flexq-old-{dead.pid}"
    out.rename(old)  # where a convert killed between its two renames leaves it
    (tmp_path / f".out.flexq-tmp-{dead.pid}").mkdir()
    _remove_stale(out)
    assert (out / MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]
