"""Whole-file integrity: sha256 of every file, against the cache's blob names or a manifest.

For :func:`flexq.verify` with ``sha256=True``. A Hugging Face cache names each LFS
blob by the sha256 of its content (``blobs/<64 hex>``), so a snapshot is checked with
no network; a plain directory is checked against a manifest written earlier
(``write_manifest``), which is never written into the checkpoint directory. Files
are hashed in parallel threads (hashlib releases the GIL), in chunks.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from flexq.check.report import Problem
from flexq.errors import CheckpointError
from flexq.interrupts import uninterrupted

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from flexq.io.hub import Files

CHUNK = 8 << 20
THREADS = 4
BLOB = re.compile(r"[0-9a-f]{64}")
MANIFEST_VERSION = 1


def sha256_file(
    path: Path,
    progress: Callable[[int], None] | None = None,
    stop: threading.Event | None = None,
) -> str:
    """The hex sha256 of the file at ``path``, read in chunks (``progress`` gets each
    chunk's byte count; a set ``stop`` ends the read early, with an unusable digest)."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        while (stop is None or not stop.is_set()) and (chunk := fh.read(CHUNK)):
            digest.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return digest.hexdigest()


def _files(files: Files) -> dict[str, Path]:
    """Every regular file of the checkpoint directory, by name (links resolved)."""
    return {p.name: p.resolve() for p in sorted(files.path.iterdir()) if p.is_file()}


def _hash_all(paths: dict[str, Path], progress: Callable[[int], None] | None) -> dict[str, str]:
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=min(THREADS, max(1, len(paths))))
    try:
        with uninterrupted():  # an interrupt inside submit() would leave a thread unjoined
            futures = {n: pool.submit(sha256_file, p, progress, stop) for n, p in paths.items()}
        # Wait for the first failure, not in order: one bad file stops them all.
        wait(futures.values(), return_when=FIRST_EXCEPTION)
        return {name: f.result() for name, f in futures.items()}
    finally:
        # An interrupt (or a read error) ends every hash at its next chunk, not at
        # the end of a multi-GB file, and every thread is joined before it propagates;
        # after a success there is nothing left to stop.
        stop.set()
        pool.shutdown(cancel_futures=True)


def check_blobs(
    files: Files, progress: Callable[[int], None] | None = None
) -> tuple[int, list[Problem]]:
    """Re-hash every LFS blob of a cache snapshot and compare with its name: (bytes
    hashed, one problem per corrupt blob).

    :raises CheckpointError: when the directory is no cache snapshot (use a manifest).
    """
    if files.link_root is None:
        raise CheckpointError(
            f"{files.path}: not a Hugging Face cache snapshot, so no blob names to check "
            f"against; write a manifest once with --write-manifest FILE and check with "
            f"--manifest FILE"
        )
    blobs = {n: p for n, p in _files(files).items() if BLOB.fullmatch(p.name)}
    got = _hash_all(blobs, progress)
    problems = [
        Problem(
            kind="corrupt-blob",
            message=f"{name}: its blob {blobs[name].name[:12]}... hashes to {digest[:12]}...: "
            f"the file is corrupt",
            fix=f"delete {blobs[name]} and download the file again (huggingface-cli download)",
            file=name,
        )
        for name, digest in got.items()
        if digest != blobs[name].name
    ]
    return sum(p.stat().st_size for p in blobs.values()), problems


def write_manifest(
    files: Files, manifest: Path, progress: Callable[[int], None] | None = None
) -> int:
    """Record the sha256 of every file of the checkpoint in ``manifest`` (outside it):
    the bytes hashed."""
    where = manifest.resolve()
    tree = files.link_root  # a cache snapshot's models--* tree is the download's too
    if where.parent == files.root or (tree is not None and tree in where.parents):
        raise CheckpointError(
            f"{manifest}: flexq never writes into the checkpoint directory; put the "
            f"manifest elsewhere"
        )
    paths = _files(files)
    doc = {"version": MANIFEST_VERSION, "sha256": _hash_all(paths, progress)}
    # Whole or not at all: written beside its place, renamed over it with signals held.
    part = manifest.with_name(f".{manifest.name}.part")
    with uninterrupted():
        try:
            part.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
            os.replace(part, manifest)
        finally:
            part.unlink(missing_ok=True)
    return sum(p.stat().st_size for p in paths.values())


def check_manifest(
    files: Files, manifest: Path, progress: Callable[[int], None] | None = None
) -> tuple[int, list[Problem]]:
    """Compare every file the ``manifest`` lists with its recorded sha256."""
    try:
        doc = json.loads(manifest.read_text())
        recorded = doc["sha256"]
        assert isinstance(recorded, dict)
    except (OSError, ValueError, KeyError, AssertionError) as exc:
        raise CheckpointError(
            f"{manifest}: not a flexq manifest ({exc}); write one with --write-manifest"
        ) from None
    paths = _files(files)
    problems = [
        Problem(
            kind="manifest",
            message=f"{name}: listed in {manifest} but missing",
            fix="copy the file again",
            file=name,
        )
        for name in sorted(set(recorded) - set(paths))
    ]
    present = {n: p for n, p in paths.items() if n in recorded}
    got = _hash_all(present, progress)
    problems += [
        Problem(
            kind="manifest",
            message=f"{name}: sha256 {digest[:12]}... differs from {manifest}'s "
            f"{str(recorded[name])[:12]}...: the file changed or is corrupt",
            fix="copy the file again from the source the manifest was written from",
            file=name,
        )
        for name, digest in got.items()
        if digest != recorded[name]
    ]
    return sum(p.stat().st_size for p in present.values()), problems
