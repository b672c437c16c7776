"""Hypothesis fuzzing of the reader and every decoder: random and mutated files only ever
load or raise flexq's own errors.

The hostile-JSON tests nest arrays and objects up to 100,000 deep and repeat keys
in headers, tensor entries, config.json and index weight maps. Small example counts by default (the whole file runs in seconds); ``nox -s fuzz``
sets ``FLEXQ_FUZZ_EXAMPLES`` to run thousands. Each example writes its files to
a fresh temporary directory, composes the installed formats over it and
dequantizes every logical tensor on the numpy path.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import tempfile
import tracemalloc
import warnings
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flexq
from flexq.errors import CheckpointError, FlexqError, ScaleWarning
from flexq.io.jsonobj import MAX_DEPTH

from .reliability import surgery

EXAMPLES = int(os.environ.get("FLEXQ_FUZZ_EXAMPLES", "30"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FORMATS = sorted(surgery.BUILDERS)
#: Python allocation peak allowed while opening a mutated tiny checkpoint.
PEAK_BYTES = 4_000_000


@cache
def valid_files(fmt: str) -> dict[str, bytes]:
    """The files of a valid tiny checkpoint of ``fmt`` (built once)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = surgery.BUILDERS[fmt](Path(tmp) / "c")
        return {p.name: p.read_bytes() for p in path.iterdir()}


@contextlib.contextmanager
def checkpoint(files: dict[str, bytes]) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        for name, blob in files.items():
            (Path(tmp) / name).write_bytes(blob)
        yield Path(tmp)


def load_everything(path: Path) -> tuple[dict[str, np.ndarray], list[str]] | None:
    """Every logical tensor as float32 (with the ScaleWarnings raised), or None on a FlexqError.

    Anything but a FlexqError escaping is a bug, and so is a large allocation
    while the headers are read.
    """
    tracemalloc.start()
    try:
        ct = flexq.compose(path)
    except FlexqError:
        return None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < PEAK_BYTES
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ScaleWarning)
        try:
            for key, entry in ct.entries.items():
                dtype = entry.dtype if entry.is_passthrough else "float32"
                out[key] = ct.load(key, dtype)
        except FlexqError:
            return None
        finally:
            ct.checkpoint.close()
    return out, [str(w.message) for w in caught if issubclass(w.category, ScaleWarning)]


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes_as_a_safetensors_file(blob: bytes) -> None:
    with checkpoint({"model.safetensors": blob}) as path:
        load_everything(path)


@FUZZ
@given(
    st.sampled_from(FORMATS),
    st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=8
    ),
    st.booleans(),
)
def test_mutated_valid_checkpoints(
    fmt: str, edits: list[tuple[float, int]], in_header: bool
) -> None:
    files = dict(valid_files(fmt))
    blob = bytearray(files["model.safetensors"])
    (n,) = struct.unpack("<Q", blob[:8])
    # Half the examples edit the header (and its length), half the data.
    lo, hi = (0, 8 + n) if in_header else (8 + n, len(blob))
    for where, value in edits:
        blob[lo + int(where * (hi - lo))] = value
    files["model.safetensors"] = bytes(blob)
    with checkpoint(files) as path:
        load_everything(path)


@FUZZ
@given(st.sampled_from(FORMATS), st.integers(0, 2**32 - 1))
def test_random_data_through_each_decoder(fmt: str, seed: int) -> None:
    """Valid headers, random tensor bytes: every decoder returns a result or a FlexqError."""
    files = dict(valid_files(fmt))
    blob = files["model.safetensors"]
    (n,) = struct.unpack("<Q", blob[:8])
    data = bytearray(np.random.default_rng(seed).bytes(len(blob) - 8 - n))
    if fmt == "gptq":
        # g_idx must name groups that exist (other values are refused, as they should
        # be): keep the valid one and randomise everything else.
        lo, hi = json.loads(blob[8 : 8 + n])[surgery.GPTQ_PREFIX + ".g_idx"]["data_offsets"]
        data[lo:hi] = blob[8 + n + lo : 8 + n + hi]
    files["model.safetensors"] = blob[: 8 + n] + bytes(data)
    with checkpoint(files) as path:
        result = load_everything(path)
    assert result is not None  # the headers are valid: nothing to refuse
    values, scale_warnings = result
    if fmt == "int4-awq" and not scale_warnings:
        # (q - z) * s with finite F16 scales is always finite.
        assert all(np.isfinite(v).all() for k, v in values.items() if k != surgery.NORM)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@FUZZ
@given(st.sampled_from(FORMATS), st.data())
def test_mutated_quantization_config(fmt: str, data: st.DataObject) -> None:
    files = dict(valid_files(fmt))
    doc: dict[str, Any] = json.loads(files.get("config.json", b"{}"))
    qc = doc.setdefault("quantization_config", {})
    known = [*qc, "quant_method", "weight_block_size", "group_size", "bits", "version",
             "modules_to_not_convert", "ignore", "config_groups", "format"]  # fmt: skip
    for key in data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=3)):
        qc[key] = data.draw(JSON)
    files["config.json"] = json.dumps(doc).encode()
    with checkpoint(files) as path:
        load_everything(path)


# -- hostile JSON: nesting depth and duplicate keys (issue 23) ----------------------
#: Where JSON can be damaged: the safetensors header, config.json, an index.json.
JSON_PLACES = ["header", "config.json", "index"]
INDEX = "model.safetensors.index.json"


def _with_index(files: dict[str, bytes]) -> dict[str, bytes]:
    """``files`` plus an index that puts every tensor in the one data file."""
    header, _ = _split(files["model.safetensors"])
    keys = [k for k in header if k != "__metadata__"]
    index = {"metadata": {}, "weight_map": dict.fromkeys(keys, "model.safetensors")}
    return {**files, INDEX: json.dumps(index).encode()}


def _split(blob: bytes) -> tuple[dict[str, Any], bytes]:
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8 : 8 + n]), blob[8 + n :]


def _join(header_text: str, data: bytes) -> bytes:
    raw = header_text.encode()
    return struct.pack("<Q", len(raw)) + raw + data


def _add_member(files: dict[str, bytes], place: str, member: str) -> dict[str, bytes]:
    """``files`` with the JSON text ``member`` (``"key": value``) added last to the
    top-level object of ``place``."""
    files = _with_index(files) if place == "index" else dict(files)
    name = {"header": "model.safetensors", "index": INDEX}.get(place, place)
    if place == "header":
        header, data = _split(files[name])
        files[name] = _join(json.dumps(header)[:-1] + f", {member}}}", data)
    else:
        text = files.get(name, b"{}").decode().rstrip()
        files[name] = (text[:-1] + (", " if text != "{}" else "") + member + "}").encode()
    return files


def _nested(depth: int, bracket: str) -> str:
    if bracket == "[":
        return "[" * depth + "0" + "]" * depth
    return '{"k": ' * depth + "0" + "}" * depth


@FUZZ
@given(
    st.sampled_from(FORMATS),
    st.sampled_from(JSON_PLACES),
    st.one_of(st.integers(1, 2 * MAX_DEPTH), st.integers(1_000, 100_000)),
    st.sampled_from("[{"),
)
def test_deeply_nested_json_is_refused_or_loads(
    fmt: str, place: str, depth: int, bracket: str
) -> None:
    """Any depth, anywhere: a FlexqError or a load, never a RecursionError; past the
    limit (the value sits one level inside the file's object) it is refused by its depth."""
    files = _add_member(valid_files(fmt), place, f'"deep": {_nested(depth, bracket)}')
    with checkpoint(files) as path:
        if depth + 1 > MAX_DEPTH:
            with pytest.raises(CheckpointError, match=f"nested {depth + 1} levels deep"):
                flexq.compose(path)
        else:
            load_everything(path)


@FUZZ
@given(st.sampled_from(FORMATS), st.sampled_from([*JSON_PLACES, "entry"]), st.data())
def test_duplicate_keys_are_refused_wherever_they_are(
    fmt: str, place: str, data: st.DataObject
) -> None:
    """A key given twice in one object (a tensor name, a field of its entry, a config or
    weight_map key) is a CheckpointError naming it: which value counts is ambiguous."""
    files = dict(valid_files(fmt))
    header, blob = _split(files["model.safetensors"])
    keys = sorted(k for k in header if k != "__metadata__")
    key = data.draw(st.sampled_from(keys))
    if place == "entry":
        field = data.draw(st.sampled_from(sorted(header[key])))
        entry = json.dumps(header[key])[:-1] + f", {json.dumps(field)}: {data.draw(JSON_TEXT)}}}"
        header[key] = "\0entry"
        files["model.safetensors"] = _join(
            json.dumps(header).replace('"\\u0000entry"', entry), blob
        )
        twice = field
    elif place == "config.json":
        files.setdefault("config.json", b'{"model_type": "x"}')
        config = json.loads(files["config.json"])
        twice = data.draw(st.sampled_from(sorted(config)))
        files = _add_member(files, place, f"{json.dumps(twice)}: {data.draw(JSON_TEXT)}")
    elif place == "index":
        files = _with_index(files)
        index = json.loads(files[INDEX])
        index["weight_map"] = "\0map"
        weight_map = json.dumps(dict.fromkeys(keys, "model.safetensors"))[:-1]
        weight_map += f', {json.dumps(key)}: "model.safetensors"}}'
        files[INDEX] = json.dumps(index).replace('"\\u0000map"', weight_map).encode()
        twice = key
    else:
        other = json.dumps(header[data.draw(st.sampled_from(keys))])
        files = _add_member(files, place, f"{json.dumps(key)}: {other}")
        twice = key
    with checkpoint(files) as path, pytest.raises(CheckpointError) as refused:
        flexq.compose(path)
    assert f"duplicate key {twice!r}" in str(refused.value)


#: A JSON value as text, for the second (duplicate) occurrence of a key.
JSON_TEXT = JSON.map(json.dumps)
