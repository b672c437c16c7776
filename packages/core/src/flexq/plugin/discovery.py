"""Which entry point of the group ``flexq`` the registry loads for each format name.

For :class:`flexq.plugin.manager.FormatRegistry`'s discovery: the group's entry
points, read once per process (:func:`group_entry_points`); several distributions
may offer one format name (a third-party package registering ``fp8``); the
first-party one (:data:`flexq.plugin.known.FIRST_PARTY`) is kept, and the warning
names every distribution involved.
"""

from __future__ import annotations

from importlib.metadata import EntryPoints, distributions
from typing import TYPE_CHECKING

from flexq.plugin.known import FIRST_PARTY

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint


def group_entry_points(group: str) -> EntryPoints:
    """``importlib.metadata.entry_points(group=group)``, parsing only the distributions
    whose ``entry_points.txt`` mentions ``group``.

    The standard function parses every installed distribution's entry points (every
    ``console_scripts`` of a Paddle environment) to keep one group: most of what
    reading them costs a fresh process. The distributions are walked as it walks
    them (``sys.path`` order, the first of a normalized name kept, so a shadowed
    copy is skipped the same way); a file that does not contain the group's name
    cannot declare it, and the others are parsed by ``Distribution.entry_points``.
    """
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for dist in distributions():
        # the key importlib.metadata itself deduplicates by (the directory's name)
        key = str(getattr(dist, "_normalized_name", None) or dist.name)
        if key in seen:
            continue
        seen.add(key)
        text = dist.read_text("entry_points.txt")
        if text is not None and group in text:
            found.extend(dist.entry_points.select(group=group))
    return EntryPoints(found)


def distribution_of(ep: EntryPoint) -> str:
    """The name of the distribution that declares ``ep`` (``?`` when unknown)."""
    return ep.dist.name if ep.dist else "?"


def name_and_version(ep: EntryPoint) -> tuple[str, str]:
    """The name and version of the distribution that declares ``ep`` (``?`` and ``""``
    when unknown), from one read of its METADATA file."""
    if ep.dist is None:
        return "?", ""
    # The two fields from the header block of METADATA, without the email parser that
    # Distribution.metadata runs over the whole file (most of discovery's own time).
    found: dict[str, str] = {}
    for line in (ep.dist.read_text("METADATA") or "").splitlines():
        if not line.strip():
            break  # the header block ends at the first blank line
        field, sep, value = line.partition(":")
        if sep and field in ("Name", "Version"):
            found.setdefault(field, value.strip())
    return found.get("Name") or "?", found.get("Version", "")


def kept_entry_point(name: str, eps: list[EntryPoint]) -> tuple[EntryPoint, str | None]:
    """The entry point to load for format ``name`` and, when several distributions offer
    it, the warning naming them all: a first-party one wins, else the first on sys.path
    (a third-party package registering ``fp8`` must not replace flexq's own)."""
    if len(eps) == 1:
        return eps[0], None  # no clash: no distribution's metadata need be read
    kept = next((ep for ep in eps if distribution_of(ep) in FIRST_PARTY), eps[0])
    dist = distribution_of(kept)
    others = sorted({distribution_of(ep) for ep in eps} - {dist})
    if not others:
        return kept, None
    why = "flexq's own" if dist in FIRST_PARTY else "found first on sys.path"
    return kept, (
        f"format {name!r} is offered by {dist} and by {', '.join(others)}; keeping {dist} "
        f"({why}), {', '.join(others)} is not loaded (uninstall {others[0]} to silence this)"
    )
