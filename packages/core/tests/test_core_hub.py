"""Checkpoints from the Hugging Face cache: snapshot paths and repo ids, API and CLI.

Every test builds its own cache tree (``blobs/``, a snapshot of relative
symlinks, ``refs/main``) under ``HF_HUB_CACHE`` and runs with ``HF_HUB_OFFLINE=1``
(or with the network blocked), so nothing reaches the hub.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import flexq
from flexq.cli import main
from flexq.errors import CheckpointError
from flexq.io.hub import resolve

if TYPE_CHECKING:
    from pathlib import Path

REPO = "toy-org/toy-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
EXPECTED_A = np.arange(-6, 6, dtype=np.float32).reshape(3, 4) * 0.5


def build_cache(cache: Path, src: Path, repo: str = REPO, commit: str = COMMIT) -> Path:
    """Move checkpoint ``src`` into a Hugging Face cache tree; returns the snapshot directory."""
    tree = cache / f"models--{repo.replace('/', '--')}"
    snap = tree / "snapshots" / commit
    (tree / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (tree / "refs").mkdir()
    (tree / "refs" / "main").write_text(commit)
    for f in sorted(src.iterdir()):
        sha = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.move(f, tree / "blobs" / sha)
        os.symlink(f"../../blobs/{sha}", snap / f.name)
    src.rmdir()
    return snap


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every DNS look-up and connection attempt fails (and is recorded)."""
    attempts: list[object] = []

    def refuse(*args: Any, **kwargs: Any) -> None:
        attempts.append(args)
        raise OSError("network access in a test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


@pytest.fixture
def cache(
    tmp_path: Path, scaled_ckpt: Path, monkeypatch: pytest.MonkeyPatch, no_network: list[object]
) -> Path:
    """A cache holding ``scaled_ckpt`` as REPO at COMMIT (main); offline; returns the snapshot."""
    root = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return build_cache(root, scaled_ckpt)


def load_a(path: str | os.PathLike[str]) -> np.ndarray:
    import paddle

    a = paddle.zeros([3, 4], dtype="float32")
    flexq.load_state_dict({"a": a}, path, formats=["scaled"])
    return np.asarray(a.numpy())


def test_snapshot_files_are_symlinks_into_blobs(cache: Path) -> None:
    links = [os.readlink(p) for p in sorted(cache.iterdir())]
    assert links
    assert all(link.startswith("../../blobs/") for link in links)


SPECS = ["snapshot", REPO, f"{REPO}@main", f"{REPO}@{COMMIT}"]


@pytest.mark.parametrize("spec", SPECS)
def test_compose_and_load_from_the_cache(
    cache: Path, scaled_format: object, spec: str, no_network: list[object]
) -> None:
    path = str(cache) if spec == "snapshot" else spec
    ct = flexq.compose(path, ["scaled"])
    assert ct.checkpoint.path == cache
    assert sorted(ct.entries) == ["a", "norm"]
    np.testing.assert_array_equal(ct.load("a"), EXPECTED_A)
    np.testing.assert_array_equal(ct.load("norm", "float32"), np.array([1.0, -2.0], np.float32))
    np.testing.assert_array_equal(load_a(path), EXPECTED_A)
    assert no_network == []


@pytest.mark.parametrize("spec", SPECS)
def test_cli_inspect_from_the_cache(
    cache: Path, scaled_format: object, spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(cache) if spec == "snapshot" else spec
    assert main(["inspect", path, "--json", "--formats", "scaled"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["path"] == str(cache)
    assert {t["key"]: t["format"] for t in report["tensors"]} == {
        "a": "scaled",
        "norm": "passthrough",
    }


@pytest.mark.parametrize("spec", [REPO, f"{REPO}@{COMMIT}", "snapshot"])
def test_cli_convert_from_the_cache(
    cache: Path, scaled_format: object, spec: str, tmp_path: Path, no_network: list[object]
) -> None:
    path = str(cache) if spec == "snapshot" else spec
    dst = tmp_path / "plain"
    assert main(["convert", path, str(dst), "--dtype", "float32", "--formats", "scaled"]) == 0
    out = flexq.Checkpoint(dst)
    np.testing.assert_array_equal(out.read("a"), EXPECTED_A)
    assert not any(p.is_symlink() for p in dst.iterdir())
    assert no_network == []


def test_a_repo_id_not_in_the_cache_is_a_clear_error_offline(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(CheckpointError, match=r"other/model: no such directory.*HF_HUB_OFFLINE"):
        flexq.Checkpoint("other/model")
    assert main(["inspect", "other/model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flexq: error: other/model: no such directory")
    assert len(err.splitlines()) == 1


def test_an_unknown_revision_is_a_clear_error_offline(cache: Path) -> None:
    with pytest.raises(CheckpointError, match=rf"{REPO}@v9: no such directory"):
        flexq.Checkpoint(f"{REPO}@v9")


def test_without_offline_mode_an_unreachable_hub_falls_back_to_the_cache(
    cache: Path, scaled_format: object, monkeypatch: pytest.MonkeyPatch, no_network: list[object]
) -> None:
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE")
    # huggingface_hub reads HF_HUB_OFFLINE once, when it is first imported.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    np.testing.assert_array_equal(load_a(REPO), EXPECTED_A)
    assert no_network, "the hub was asked first (and the connection refused)"
    with pytest.raises(CheckpointError, match="the hub cannot be reached"):
        flexq.Checkpoint("other/model")


def test_an_existing_directory_wins_over_a_repo_id(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path / "toy-org" / "toy-model"
    flexq.save_checkpoint(local, {"x": flexq.RawTensor.of(np.ones(2, np.float32))})
    monkeypatch.chdir(tmp_path)
    assert resolve(REPO) == local.relative_to(tmp_path)
    assert sorted(flexq.Checkpoint(REPO).tensors) == ["x"]


def test_a_path_that_is_neither_is_not_a_checkpoint_directory(cache: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "nope", tmp_path / "file", "a/b/c", "no-slash"):
        with pytest.raises(CheckpointError, match="not a checkpoint directory"):
            resolve(path)


def test_a_symlink_leaving_the_models_tree_is_refused(cache: Path, tmp_path: Path) -> None:
    victim = cache / "model-00002-of-00002.safetensors"
    outside = tmp_path / "elsewhere.safetensors"
    shutil.copy(victim.resolve(), outside)
    victim.unlink()
    os.symlink(os.path.relpath(outside, cache), victim)
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        flexq.Checkpoint(cache)
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        flexq.Checkpoint(REPO)


def test_a_symlink_into_another_models_tree_is_refused(cache: Path, tmp_path: Path) -> None:
    src = flexq.save_checkpoint(
        tmp_path / "other", {"x": flexq.RawTensor.of(np.ones(2, np.float32))}
    )
    other = build_cache(tmp_path / "hf-cache", src, "x/y")
    victim = cache / "model-00001-of-00002.safetensors"
    victim.unlink()
    os.symlink(os.path.relpath((other / "model.safetensors").resolve(), cache), victim)
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        flexq.Checkpoint(cache)


def test_a_plain_directory_still_refuses_links_out(tmp_path: Path, scaled_ckpt: Path) -> None:
    target = scaled_ckpt / "config.json"
    outside = tmp_path / "config.json"
    target.rename(outside)
    os.symlink(outside, target)
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        flexq.Checkpoint(scaled_ckpt)
