"""Decode JSON that must hold one object: safetensors headers, config and index files, blobs.

The one JSON decoder of flexq, for the readers of files and tensors that store
JSON: each wraps the one :class:`ValueError` this raises into its own error
type, with the file (and tensor) in front of the message. Nothing in the bytes
is trusted: a file is measured before it is read (:data:`MAX_JSON_BYTES`), the
nesting depth is measured before ``json`` recurses into it (:data:`MAX_DEPTH`),
a key given twice in one object is refused (the safetensors library refuses
such headers; Python's ``json`` silently keeps the last), and so is a string
holding a lone surrogate (``"\\ud800"``), which no file name, tensor name or
JSON output can carry.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

#: Largest JSON file or blob read (config.json, index.json): an index of 100,000
#: tensors is ~10 MB; a bigger file is refused by its size, before it is read.
MAX_JSON_BYTES = 64 * 2**20
#: Deepest nesting of arrays and objects accepted (real files nest fewer than 10 deep;
#: Python's json recurses once per level and dies near 1000).
MAX_DEPTH = 64

#: What a JSON document that is not an object is, in JSON's own words.
_KINDS: dict[type, str] = {
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}
#: A JSON string (escapes included), emptied before brackets are counted in text with
#: backslashes.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_QUOTE = ord('"')
_OPEN = (ord("["), ord("{"))
_CLOSE = (ord("]"), ord("}"))
#: A \u escape of a surrogate: lone ones cannot be text (paired ones are one character).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
#: Bytes looked at per numpy pass, so the count's memory stays bounded (under 1 MB).
_CHUNK = 1 << 16


class _DuplicateKeyError(ValueError):
    pass


def read_json_file(path: Path, limit: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """The object the JSON file ``path`` holds, measured before it is read.

    :raises ValueError: as :func:`json_object`, or ``N bytes, more than the LIMIT
        a JSON file may have`` (without reading it).
    :raises OSError: when the file cannot be read.
    """
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise ValueError(f"{size} bytes, more than the {limit} a JSON file may have (not read)")
        # One byte more than stat says: a file that grew since is caught by the size check.
        return json_object(fh.read(size + 1), limit)


def json_object(raw: bytes, limit: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """The object the UTF-8 JSON bytes ``raw`` hold.

    :raises ValueError: ``not valid JSON (<why>)``, ``not a JSON object (an
        array)``, ``nested N levels deep, ...``, ``duplicate key 'k' in one object``
        or ``a string with a lone surrogate ...``.
    """
    if len(raw) > limit:
        raise ValueError(f"{len(raw)} bytes, more than the {limit} JSON may have")
    depth = nesting_depth(raw)
    if depth > MAX_DEPTH:
        raise ValueError(f"nested {depth} levels deep, more than the {MAX_DEPTH} allowed")
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique)
    except _DuplicateKeyError as exc:
        raise ValueError(str(exc)) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"not a JSON object ({_KINDS[type(doc)]})")
    if _SURROGATE.search(raw):
        _refuse_lone_surrogates(doc)
    return doc


def nesting_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in the JSON text ``raw``, counted without recursion
    (brackets inside strings do not count; unbalanced text counts as far as it goes).

    numpy passes over bounded chunks: a bracket is outside every string when an even
    number of quotes precede it. Escaped quotes would break that count, so text with
    backslashes (rare in headers and configs) has its strings emptied first.
    """
    if b"\\" in raw:
        raw = _STRING.sub(b'""', raw)
    data = np.frombuffer(raw, np.uint8)
    level = deepest = 0
    quotes_before = 0
    for start in range(0, len(data), _CHUNK):
        part = data[start : start + _CHUNK]
        quotes = np.flatnonzero(part == _QUOTE)
        opens = (part == _OPEN[0]) | (part == _OPEN[1])
        at = np.flatnonzero(opens | (part == _CLOSE[0]) | (part == _CLOSE[1]))
        at = at[(np.searchsorted(quotes, at) + quotes_before) % 2 == 0]
        quotes_before += len(quotes)
        if len(at):
            levels = np.cumsum(opens[at].astype(np.int8) * 2 - 1, dtype=np.int32) + level
            deepest = max(deepest, int(levels.max()))
            level = int(levels[-1])
    return deepest


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(
                    f"duplicate key {key!r} in one object (which of its values counts is ambiguous)"
                )
            seen.add(key)
    return doc


def _refuse_lone_surrogates(doc: dict[str, Any]) -> None:
    # Keys first: a header's keys are its tensor names, the likeliest place and the
    # most useful thing to name.
    key = next((k for k in doc if not _is_text(k)), None)
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        where = f" (in the key {key!r})" if key is not None else ""
        raise ValueError(
            f"a string with a lone surrogate {bad!r}{where}, the \\u escape of half a "
            f"character, which is not text"
        ) from None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
