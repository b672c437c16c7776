"""Decode JSON bytes that must hold one object: safetensors headers, config files, blobs.

For the readers of files and tensors that store JSON: each wraps the one
:class:`ValueError` this raises into its own error type, with the file (and
tensor) in front of the message.
"""

from __future__ import annotations

import json
from typing import Any

#: What a JSON document that is not an object is, in JSON's own words.
_KINDS: dict[type, str] = {
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


def json_object(raw: bytes) -> dict[str, Any]:
    """The object the UTF-8 JSON bytes ``raw`` hold.

    :raises ValueError: ``not valid JSON (<why>)`` or ``not a JSON object (an array)``.
    """
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"not a JSON object ({_KINDS[type(doc)]})")
    return doc
