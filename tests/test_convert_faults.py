"""``flexq convert`` under a full disk and with companion links: one clear line, nothing left.

A write that fails (no space, a file-size limit) is a ``FlexqError`` naming DST
and the file, the CLI's one line with exit 2, and the temporary directory is
removed. A companion (tokenizer, generation config) is copied only from inside
SRC: a link out of it is refused before anything is written, while a Hugging
Face cache snapshot, whose files all link into its own ``blobs/``, converts.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq.cli import convert as convert_module
from flexq.cli.main import main
from flexq.errors import CheckpointError, FlexqError
from flexq.io.writer import save_file

FLEXQ = Path(sys.executable).parent / "flexq"


def plain_ckpt(path: Path, tensors: int = 8) -> Path:
    rng = np.random.default_rng(5)
    data = {
        f"model.t{i}.weight": flexq.RawTensor.of(rng.standard_normal((64, 256)).astype(np.float32))
        for i in range(tensors)
    }
    flexq.save_checkpoint(path, data, config={"model_type": "llama"})
    (path / "tokenizer.json").write_text('{"vocab": {"a": 0}}')
    return path


def tree(directory: Path) -> dict[str, bytes]:
    """Every file below ``directory`` (links not followed) with its bytes or link text."""
    out = {}
    for p in sorted(directory.rglob("*")):
        key = str(p.relative_to(directory))
        if p.is_symlink():
            out[key] = os.readlink(p).encode()
        elif p.is_file():
            out[key] = p.read_bytes()
    return out


def _file_size_limit(limit: int) -> Any:
    def apply() -> None:
        # Past the limit a write fails with EFBIG instead of killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("shard_size", ["5GB", "150KB"])
def test_a_file_size_limit_is_one_line_and_leaves_nothing(tmp_path: Path, shard_size: str) -> None:
    """RLIMIT_FSIZE (what a full or capped file system looks like to a writer): the
    first shard past the limit fails with EFBIG: exit 2, one line naming it."""
    src = plain_ckpt(tmp_path / "src")
    before = tree(src)
    proc = subprocess.run(
        [str(FLEXQ), "convert", str(src), str(tmp_path / "out"), "--max-shard-size", shard_size],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=_file_size_limit(100_000),
        timeout=120,
    )
    shard = "model.safetensors" if shard_size == "5GB" else "model-00001-of-00004.safetensors"
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"flexq: error: {tmp_path / 'out'}: writing {shard} failed: File too large; the "
        "partial output was removed (a smaller --max-shard-size keeps every file under "
        "the size limit)\n"
    )
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    assert tree(src) == before


@pytest.mark.parametrize("where", ["shard", "index", "companion", "marker"])
def test_no_space_left_is_one_line_naming_the_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    """ENOSPC from any write convert makes: exit 2, one line naming DST and the file,
    and no DST and no temporary directory."""
    src = plain_ckpt(tmp_path / "src")
    before = tree(src)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def no_space(*args: Any, **kwargs: Any) -> None:
        raise full

    name = {"shard": "model-00002-of-00008.safetensors", "index": "model.safetensors.index.json",
            "companion": "tokenizer.json", "marker": ".flexq-convert"}[where]  # fmt: skip
    if where == "shard":
        real = save_file

        def second_fails(tensors: Any, path: Path, metadata: Any) -> None:
            if path.name == name:
                raise full
            real(tensors, path, metadata)

        monkeypatch.setattr(convert_module, "save_file", second_fails)
    elif where == "companion":
        monkeypatch.setattr("shutil.copyfile", no_space)
    else:
        real_write = Path.write_text

        def write_text(self: Path, *args: Any, **kwargs: Any) -> int:
            if self.name == name:
                raise full
            return real_write(self, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", write_text)
    out = tmp_path / "out"
    assert main(["convert", str(src), str(out), "--max-shard-size", "70KB"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"flexq: error: {out}: writing {name} failed: No space left on device; the partial "
        "output was removed (free space on DST's file system, or choose a DST on another one)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    assert tree(src) == before


def test_the_writer_reports_the_os_error_safetensors_hides(tmp_path: Path) -> None:
    """safetensors raises its own SafetensorError for a failed write; flexq's writer
    raises the OSError (errno and file) it stands for."""
    code = (
        "import errno, resource, signal, numpy as np, flexq\n"
        "from flexq.io.writer import save_file\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "try:\n"
        "    save_file({'a': flexq.RawTensor.of(np.ones(4096, np.float32))}, 'x.st', None)\n"
        "except OSError as exc:\n"
        "    print(exc.errno == errno.EFBIG, exc.filename)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert proc.stdout == "True x.st\n"


def test_a_companion_linking_out_of_src_is_refused_before_any_write(tmp_path: Path) -> None:
    src = plain_ckpt(tmp_path / "src")
    (tmp_path / "secret").mkdir()
    secret = tmp_path / "secret" / "id_rsa"
    secret.write_text("PRIVATE KEY")
    (src / "tokenizer.json").unlink()
    (src / "tokenizer.json").symlink_to(secret)
    before = tree(src)
    with pytest.raises(CheckpointError) as info:
        convert_module.convert(src, tmp_path / "out")
    assert str(info.value) == (
        f"{src}: 'tokenizer.json' resolves to {secret}, outside the checkpoint directory; "
        "convert copies companions only from inside the checkpoint (copy the file into it, "
        "or remove the link)"
    )
    proc = subprocess.run(
        [str(FLEXQ), "convert", str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"flexq: error: {info.value}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret", "src"]
    assert tree(src) == before
    assert secret.read_text() == "PRIVATE KEY"


def test_a_companion_linking_inside_src_is_copied(tmp_path: Path) -> None:
    src = plain_ckpt(tmp_path / "src")
    (src / "tokenizer.json").rename(src / "tok.json")
    (src / "tokenizer.json").symlink_to("tok.json")
    report = convert_module.convert(src, tmp_path / "out")
    out = tmp_path / "out" / "tokenizer.json"
    assert not out.is_symlink()
    assert out.read_text() == '{"vocab": {"a": 0}}'
    assert report.skipped == ("tok.json",)


def test_a_hugging_face_cache_snapshot_converts_with_its_companions(tmp_path: Path) -> None:
    """A cache snapshot's files are links into ``../../blobs`` of the same models--* tree
    (see flexq.io.hub.allowed_link_root): companions from there are copied."""
    plain = plain_ckpt(tmp_path / "plain")
    (plain / "generation_config.json").write_text('{"do_sample": false}')
    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / "0123abcd"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for f in sorted(plain.iterdir()):
        blob = repo / "blobs" / f"blob-{f.name}"
        blob.write_bytes(f.read_bytes())
        (snapshot / f.name).symlink_to(Path("..", "..", "blobs", blob.name))
    convert_module.convert(snapshot, tmp_path / "out")
    out = tmp_path / "out"
    assert (out / "tokenizer.json").read_text() == '{"vocab": {"a": 0}}'
    assert (out / "generation_config.json").read_text() == '{"do_sample": false}'
    assert not any(p.is_symlink() for p in out.iterdir())


def test_a_failed_write_through_the_api_is_a_flexq_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = plain_ckpt(tmp_path / "src")

    def no_space(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(convert_module, "save_file", no_space)
    with pytest.raises(FlexqError, match=r"writing model\.safetensors failed: No space left"):
        convert_module.convert(src, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
