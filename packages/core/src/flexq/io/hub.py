"""Turn what a user has into a checkpoint directory, and name the files in it a reader may open.

For every entry point that takes a checkpoint path (:class:`flexq.Checkpoint`,
and through it :func:`flexq.compose`, :func:`flexq.load_state_dict`,
``flexq.paddleformers`` and the CLI). Users have one of:

- a checkpoint directory (plain files, e.g. ``huggingface-cli download --local-dir``);
- a Hugging Face cache snapshot (``snapshot_download()``'s return value): its
  files are relative symlinks into ``../../blobs/`` of the same ``models--*``
  tree, which :func:`allowed_link_root` lets the reader follow;
- a hub repo id ``org/name[@revision]``, resolved through ``huggingface_hub``:
  from the cache when ``HF_HUB_OFFLINE`` is set or the hub cannot be reached,
  downloaded otherwise (only the ``*.safetensors`` and ``*.json`` files).

:func:`locate` gives the reader that directory as :class:`Files`: its data
files (from the ``*.safetensors.index.json`` or the directory listing) and its
JSON files, each checked to be a plain name that stays inside the directory or
its cache tree.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexq.errors import CheckpointError
from flexq.io.jsonobj import read_json_file

if TYPE_CHECKING:
    from collections.abc import Collection

#: ``org/name`` with an optional ``@revision`` (branch, tag or commit).
REPO_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?")
INDEX_SUFFIX = ".safetensors.index.json"
PREFERRED_INDEX = "model.safetensors.index.json"
#: The files a checkpoint needs: tensors, indexes, config.json, quant_config.json,
#: tokenizer and generation configs.
DOWNLOADED = ["*.safetensors", "*.json"]
_TRUE = {"1", "ON", "YES", "TRUE"}


#: weight-file suffixes of formats flexq does not read, named when no safetensors is found.
OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt")


@dataclass(frozen=True)
class Files:
    """The files of one checkpoint directory that the reader may open.

    :ivar path: the directory (a repo id already resolved to its cache snapshot).
    :ivar link_root: where its files may point besides itself: the ``models--*``
        tree of a Hugging Face cache snapshot (see :func:`allowed_link_root`), else None.
    """

    path: Path
    link_root: Path | None
    #: ``path`` with its links resolved (what the files' own resolutions are held against).
    root: Path

    def safe_path(self, name: object) -> Path:
        """Resolve a file name from the index, refusing anything outside the directory
        (or, for a cache snapshot, outside its ``models--*`` tree)."""
        if (
            not isinstance(name, str)
            or not name
            or name in (".", "..")
            or "/" in name
            or "\\" in name
            or "\0" in name
        ):
            raise CheckpointError(f"{self.path}: file name {name!r} is not a plain file name")
        try:
            resolved = (self.root / name).resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before 3.13)
            raise CheckpointError(f"{self.path}: {name!r} cannot be resolved ({exc})") from None
        inside_tree = self.link_root is not None and self.link_root in resolved.parents
        if resolved.parent != self.root and not inside_tree:
            raise CheckpointError(
                f"{self.path}: {name!r} resolves to {resolved}, outside the checkpoint directory"
            )
        if not resolved.is_file():
            raise CheckpointError(f"{self.path}: file {name!r} is missing")
        return resolved

    def read_json(self, name: str) -> dict[str, Any]:
        """An optional JSON object file of the checkpoint ({} when absent), bounded in
        size and depth (:mod:`flexq.io.jsonobj`)."""
        if not os.path.lexists(self.path / name):
            return {}
        return self._json(name)

    def _json(self, name: str, kind: str = "") -> dict[str, Any]:
        """The JSON object file ``name``; ``kind`` says in errors what it should be."""
        path = self.safe_path(name)
        try:
            return read_json_file(path)
        except ValueError as exc:
            why = f"not {kind} ({exc})" if kind else str(exc)
            raise CheckpointError(f"{self.path / name}: {why}") from None
        except OSError as exc:
            raise CheckpointError(f"{self.path / name}: cannot be read ({exc})") from None

    def _other_weights(self) -> str:
        """For a directory without safetensors: the weights file of another format it
        holds (PyTorch's pickles), named, with what to do."""
        seen = sorted(p.name for ext in OTHER_WEIGHTS for p in self.path.glob(f"*{ext}"))
        if not seen:
            return ""
        more = f" and {len(seen) - 1} more" if len(seen) > 1 else ""
        return (
            f"; it holds {seen[0]}{more}, a PyTorch file: flexq reads only safetensors "
            "checkpoints (download the repo's *.safetensors files, or convert it to safetensors, "
            "e.g. with safetensors.torch.save_file)"
        )

    def data_files(self, skip: Collection[str] = ()) -> dict[str, tuple[Path, set[str] | None]]:
        """Data file name -> (its checked path, the keys the index assigns to it, or
        None without an index), leaving out the files named in ``skip`` (the ones
        :func:`flexq.verify` already reported as missing or damaged)."""
        indexes = sorted(p.name for p in self.path.glob(f"*{INDEX_SUFFIX}"))
        if PREFERRED_INDEX in indexes:
            indexes = [PREFERRED_INDEX]
        if len(indexes) > 1:
            raise CheckpointError(f"{self.path}: several index files {indexes}")
        if not indexes:
            names = sorted(p.name for p in self.path.glob("*.safetensors"))
            if not names:
                raise CheckpointError(
                    f"{self.path.absolute()}: no *.safetensors files{self._other_weights()}"
                )
            return {name: (self.safe_path(name), None) for name in names if name not in skip}
        index = self.path / indexes[0]
        weight_map = self._json(indexes[0], "an index with a weight_map").get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: weight_map is {_what(weight_map)}, not a JSON object")
        files: dict[str, tuple[Path, set[str] | None]] = {}
        for key, name in weight_map.items():
            if not isinstance(name, str):
                raise CheckpointError(
                    f"{index}: weight_map puts {key!r} in {name!r}, not in one file name"
                )
            if name in skip:
                continue
            if name not in files:
                files[name] = (self.safe_path(name), set())
            keys = files[name][1]
            assert keys is not None
            keys.add(key)
        return files


def _what(value: object) -> str:
    return "missing" if value is None else f"{value!r:.40}"


def locate(path: str | os.PathLike[str]) -> Files:
    """The checkpoint directory ``path`` names (see :func:`resolve`) and where its
    files may point.

    :raises CheckpointError: as :func:`resolve`.
    """
    directory = resolve(path)
    return Files(directory, allowed_link_root(directory), directory.resolve())


def resolve(path: str | os.PathLike[str]) -> Path:
    """The checkpoint directory ``path`` names: itself, or the cache snapshot of a repo id.

    An existing directory always wins over a repo id of the same spelling.

    :raises CheckpointError: when ``path`` is neither a directory nor a repo id
        that is cached or can be downloaded.
    """
    local = Path(path)
    if local.is_dir():
        return local
    match = REPO_ID.fullmatch(os.fspath(path))
    if match is None or local.exists():
        raise CheckpointError(not_a_directory(local))
    return snapshot(match["repo"], match["revision"])


def not_a_directory(path: Path) -> str:
    """Why ``path`` is no checkpoint directory, and what to pass instead."""
    if not path.exists():
        return f"{path}: no such directory (the checkpoint path does not exist)"
    if path.suffix == ".gguf":
        return f"{path}: is a GGUF file: install flexq-format-gguf to read it"
    if path.suffix == ".safetensors" or path.name.endswith(".safetensors.index.json"):
        return (
            f"{path}: is a file; pass the checkpoint directory that holds it ({path.parent or '.'})"
        )
    return f"{path}: not a directory (a checkpoint is a directory of *.safetensors files)"


def snapshot(repo_id: str, revision: str | None = None) -> Path:
    """The local snapshot directory of ``repo_id`` at ``revision`` (default: main).

    Offline (``HF_HUB_OFFLINE``) or when the hub cannot be reached, the cache
    (``HF_HUB_CACHE``, read at call time) must hold it; otherwise missing files
    are downloaded into the cache.

    :raises CheckpointError: when huggingface_hub is not installed, the repo or
        revision does not exist, or it is not cached and cannot be downloaded.
    """
    spec = repo_id if revision is None else f"{repo_id}@{revision}"
    try:
        from huggingface_hub import errors, snapshot_download
    except ImportError:
        raise CheckpointError(
            f"{spec}: no such directory; to load it as a Hugging Face repo id, "
            "pip install huggingface_hub (the 'hub' extra of flexq)"
        ) from None
    # Newer huggingface_hub versions refuse a cached snapshot that misses files.
    incomplete = getattr(errors, "IncompleteSnapshotError", errors.LocalEntryNotFoundError)
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in _TRUE
    cache = os.environ.get("HF_HUB_CACHE") or None
    try:
        folder = snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=cache,
            allow_patterns=DOWNLOADED,
            local_files_only=offline,
        )
    except (errors.RepositoryNotFoundError, errors.GatedRepoError) as exc:
        raise CheckpointError(
            f"{spec}: no such directory, and no such repository on the Hugging Face hub "
            f"(or it is gated or private: {type(exc).__name__})"
        ) from None
    except errors.RevisionNotFoundError:
        raise CheckpointError(
            f"{spec}: no such directory, and the hub has no revision {revision!r}"
        ) from None
    except (errors.LocalEntryNotFoundError, incomplete) as exc:
        where = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached"
        raise CheckpointError(
            f"{spec}: no such directory, not (completely) in the Hugging Face cache "
            f"{cache or 'at its default place'}, and {where} ({type(exc).__name__})"
        ) from None
    except (errors.HfHubHTTPError, errors.HFValidationError, OSError) as exc:
        raise CheckpointError(
            f"{spec}: no such directory, and it cannot be fetched from the Hugging Face hub "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return Path(folder)


def allowed_link_root(directory: Path) -> Path | None:
    """Where files of ``directory`` may point when it is a Hugging Face cache snapshot.

    A snapshot is ``.../models--{org}--{name}/snapshots/{revision}``; its files
    are symlinks into ``../../blobs``. Returns the ``models--*`` tree (links that
    resolve inside it are the cache's own), or None for any other directory.
    """
    resolved = directory.resolve()
    parent = resolved.parent
    if parent.name == "snapshots" and parent.parent.name.startswith("models--"):
        return parent.parent
    return None
