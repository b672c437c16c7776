"""Turn what a user has into a checkpoint directory.

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
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from flexq.errors import CheckpointError

#: ``org/name`` with an optional ``@revision`` (branch, tag or commit).
REPO_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?")
#: The files a checkpoint needs: tensors, indexes, config.json, quant_config.json,
#: tokenizer and generation configs.
DOWNLOADED = ["*.safetensors", "*.json"]
_TRUE = {"1", "ON", "YES", "TRUE"}


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
        raise CheckpointError(f"{local}: not a checkpoint directory")
    return snapshot(match["repo"], match["revision"])


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
            "install huggingface_hub (pip install 'flexq[hub]')"
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
