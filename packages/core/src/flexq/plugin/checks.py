"""What a hook result must be, for the registry's checked hook calls.

For :class:`flexq.plugin.manager.FormatRegistry`: each function tells what is
wrong with a plugin's result in words an error message can use (the registry
adds the format, its distribution and the hook), or gives the checked value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from flexq.io.dtypes import BY_PADDLE
from flexq.plan import LogicalTensor
from flexq.plugin.spec import API_ATTRIBUTE, API_VERSION


def shown(value: object) -> str:
    """``value`` for a message: its repr (cut at 60 characters) and its type."""
    return f"{value!r:.60} ({type(value).__name__})"


def as_names(value: object) -> frozenset[str] | None:
    """``value`` as a set of strings, or None when it is not an iterable of strings."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return None
    items = list(value)
    return frozenset(items) if all(isinstance(v, str) for v in items) else None


def logical_problem(meta: object) -> str | None:
    """What is wrong with one value of a ``flexq_logical_metadata`` result, or None."""
    if not isinstance(meta, LogicalTensor):
        return f"is {shown(meta)}, not a flexq.LogicalTensor"
    shape = meta.shape
    if not isinstance(shape, (tuple, list)) or not all(type(d) is int and d >= 0 for d in shape):
        return f"has shape {shown(shape)}, not a tuple of non-negative ints"
    if not isinstance(meta.dtype, str) or meta.dtype not in BY_PADDLE:
        return f"has dtype {shown(meta.dtype)}, not a Paddle dtype name such as 'bfloat16'"
    return None


_MAJOR_MINOR = re.compile(r"(\d+)\.(\d+)")


def api_version_problem(plugin: object, current: str = API_VERSION) -> str | None:
    """Why ``plugin``, by the kit API version it declares (its ``FLEXQ_API_VERSION``),
    cannot run against this flexq's ``current`` one, or None when it can: the same major
    version, or nothing declared (a plugin older than the number, taken as major 1)."""
    declared = getattr(plugin, API_ATTRIBUTE, None)
    if declared is None:
        declared_major = "1"
    elif isinstance(declared, str) and (match := _MAJOR_MINOR.fullmatch(declared)):
        declared_major = match.group(1)
    else:
        return f"declares kit API version {shown(declared)}, not 'major.minor' like {current!r}"
    if declared_major == current.split(".")[0]:
        return None
    shown_declared = declared if declared is not None else "1.x (none declared)"
    return (
        f"was built for flexq kit API {shown_declared}, and this flexq's kit API is "
        f"{current}: the major versions differ"
    )
