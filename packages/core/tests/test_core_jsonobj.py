"""The one JSON decoder: depth counted without recursion, duplicates, surrogates, sizes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexq.io.jsonobj import MAX_DEPTH, json_object, nesting_depth, read_json_file

if TYPE_CHECKING:
    from pathlib import Path

#: Strings full of what would fool a naive bracket count: brackets, quotes, backslashes.
TRICKY = st.text(alphabet='[]{}"\\ab', max_size=6)
VALUES = st.recursive(
    st.none() | st.integers() | TRICKY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY, inner, max_size=3),
    max_leaves=12,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_nesting_depth_counts_only_brackets_outside_strings(value: Any) -> None:
    assert nesting_depth(json.dumps(value).encode()) == depth(value)


@pytest.mark.parametrize("bracket", ["[", "{"])
def test_json_nested_past_the_limit_is_refused_without_recursing(bracket: str) -> None:
    inner = (
        "[" * 100_000 + "]" * 100_000 if bracket == "[" else '{"a":' * 100_000 + "1" + "}" * 100_000
    )
    with pytest.raises(ValueError, match="nested 100001 levels deep, more than the 64"):
        json_object(f'{{"x": {inner}}}'.encode())
    at_limit = '{"x": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    assert nesting_depth(at_limit.encode()) == MAX_DEPTH
    assert "x" in json_object(at_limit.encode())


def test_a_key_twice_in_any_object_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="duplicate key 'w' in one object"):
        json_object(b'{"w": {"dtype": "F32"}, "w": {"dtype": "BF16"}}')
    with pytest.raises(ValueError, match="duplicate key 'dtype'"):
        json_object(b'{"w": {"dtype": "F32", "dtype": "BF16"}}')
    assert json_object(b'{"w": {"dtype": "F32"}, "v": {"dtype": "F32"}}')["v"] == {"dtype": "F32"}


def test_lone_surrogates_are_refused_and_pairs_are_text() -> None:
    with pytest.raises(ValueError, match=r"lone surrogate .* \(in the key 'a\\ud800'\)"):
        json_object(b'{"a\\ud800": 1}')
    assert json_object(b'{"x": "\\ud83d\\ude00", "y": "\\\\ud800"}') == {
        "x": "\U0001f600",
        "y": "\\ud800",
    }


def test_a_file_over_the_limit_is_refused_by_its_size_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "config.json"
    with open(big, "wb") as fh:
        fh.truncate(2**31)  # sparse: 2 GiB by stat, nothing on disk
    with pytest.raises(ValueError, match="2147483648 bytes, more than the 67108864"):
        read_json_file(big)
    small = tmp_path / "small.json"
    small.write_text('{"a": 1}')
    assert read_json_file(small) == {"a": 1}
    with pytest.raises(ValueError, match="8 bytes, more than the 4"):
        read_json_file(small, limit=4)
