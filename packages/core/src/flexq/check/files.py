"""Completeness: every shard the index names is there, whole, and holds what it should.

For :func:`flexq.verify`, before anything else: a missing, truncated or unreadable
shard, a tensor stored twice, an index entry its file lacks and a stray shard are
each a :class:`~flexq.check.report.Problem`, and the damaged files are left out
(``skip``) so the rest of the checkpoint is still checked. Reads headers only.
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flexq.check.report import Problem, ShardRow
from flexq.errors import CheckpointError
from flexq.io.header import MAX_HEADER_BYTES, parse_header
from flexq.io.hub import INDEX_SUFFIX, PREFERRED_INDEX
from flexq.io.jsonobj import read_json_file

if TYPE_CHECKING:
    from pathlib import Path

    from flexq.io.hub import Files

REDOWNLOAD = "download the file again (huggingface-cli download, or copy it again)"


@dataclass
class Survey:
    """What the completeness pass found."""

    shards: list[ShardRow] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    #: files left out of the checkpoint the later checks open
    skip: set[str] = field(default_factory=set)


def survey(files: Files) -> Survey:
    """Check every data file of the checkpoint ``files`` locates (headers only)."""
    found = Survey()
    named = _named(files, found)
    seen: dict[str, str] = {}  # tensor -> the file holding it
    for name in sorted(named):
        keys = _check_file(files, name, found)
        if keys is None:
            continue
        twice = sorted(k for k in keys if k in seen)
        for key in twice:
            found.problems.append(
                Problem(
                    kind="duplicate-tensor",
                    message=f"{name}: tensor {key!r} is also stored in {seen[key]}",
                    fix="keep one copy: the download mixes two revisions, or a producer "
                    "wrote the tensor twice; download the checkpoint again",
                    file=name,
                )
            )
        lacking = sorted((named[name] or set()) - keys)
        if lacking:
            found.problems.append(
                Problem(
                    kind="index",
                    message=f"{name}: the index puts {len(lacking)} tensor(s) here that the "
                    f"file lacks (first {lacking[0]!r})",
                    fix=f"the index and {name} are from different revisions; {REDOWNLOAD}",
                    file=name,
                )
            )
        if twice or lacking:
            found.skip.add(name)
            continue
        seen.update(dict.fromkeys(keys, name))
    return found


def _named(files: Files, found: Survey) -> dict[str, set[str] | None]:
    """The data files the index names (file -> its keys), or every ``*.safetensors``."""
    indexes = sorted(p.name for p in files.path.glob(f"*{INDEX_SUFFIX}"))
    if PREFERRED_INDEX in indexes:
        indexes = [PREFERRED_INDEX]
    present = sorted(p.name for p in files.path.glob("*.safetensors"))
    if len(indexes) != 1:
        # No index (or several, which the reader refuses with its own message): the files.
        return dict.fromkeys(present)
    try:
        doc = read_json_file(files.safe_path(indexes[0]))
    except (ValueError, OSError) as exc:
        raise CheckpointError(f"{files.path / indexes[0]}: {exc}") from None
    weight_map = doc.get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{files.path / indexes[0]}: weight_map is not a JSON object")
    named: dict[str, set[str] | None] = {}
    for key, name in weight_map.items():
        if not isinstance(name, str):
            raise CheckpointError(f"{files.path / indexes[0]}: weight_map puts {key!r} in {name!r}")
        keys = named.setdefault(name, set())
        assert keys is not None
        keys.add(key)
    for name in present:
        if name not in named:
            found.skip.add(name)
            found.problems.append(
                Problem(
                    kind="stray-shard",
                    message=f"{name}: a data file the index {indexes[0]} does not name",
                    fix="remove it from the directory, or take the index of its revision "
                    "(flexq reads only what the index names)",
                    file=name,
                )
            )
    return named


def _check_file(files: Files, name: str, found: Survey) -> set[str] | None:
    """The tensor keys of data file ``name``, or None (with a problem) when it is missing,
    shorter than its header implies, or unreadable."""
    try:
        path = files.safe_path(name)
    except CheckpointError as exc:
        found.skip.add(name)
        found.shards.append(ShardRow(file=name, expected_bytes=None, actual_bytes=None, ok=False))
        found.problems.append(
            Problem(kind="missing-shard", message=str(exc), fix=REDOWNLOAD, file=name)
        )
        return None
    try:
        expected, actual, keys = _sizes(path, name)
    except (CheckpointError, OSError) as exc:
        found.skip.add(name)
        found.shards.append(ShardRow(file=name, expected_bytes=None, actual_bytes=None, ok=False))
        found.problems.append(
            Problem(kind="unreadable-shard", message=f"{name}: {exc}", fix=REDOWNLOAD, file=name)
        )
        return None
    whole = actual >= expected
    found.shards.append(ShardRow(file=name, expected_bytes=expected, actual_bytes=actual, ok=whole))
    if not whole:
        found.skip.add(name)
        found.problems.append(
            Problem(
                kind="truncated-shard",
                message=f"{name}: {actual:,} bytes, but its header implies {expected:,} "
                f"({expected - actual:,} missing: a partial download)",
                fix=REDOWNLOAD,
                file=name,
            )
        )
        return None
    return keys


def _sizes(path: Path, name: str) -> tuple[int, int, set[str]]:
    """(the size the header of ``path`` implies, its size on disk, its tensor keys)."""
    with open(path, "rb") as fh:
        actual = fh.seek(0, 2)
        fh.seek(0)
        head = fh.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{actual} bytes is too short for a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            raise CheckpointError(f"header length {length} exceeds {MAX_HEADER_BYTES}")
        raw = fh.read(length)
    if len(raw) < length:
        # Cut inside the header: what the header implies is unknown beyond it.
        return 8 + length, actual, set()
    # Parsed as if the file were as long as it needs to be: the header's own checks
    # (dtypes, shapes, overlaps) still run, and its data end is what it implies.
    header = parse_header(raw, sys.maxsize, name)
    ends = [t.start + t.nbytes for t in header.tensors.values()]
    return max(ends, default=8 + length), actual, set(header.tensors)
