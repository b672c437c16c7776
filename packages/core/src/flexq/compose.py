"""Compose the installed formats over one checkpoint.

:func:`composition_of` builds the :class:`flexq.composition.Composition` that flexq's
own engines, inspect, convert and verify use: every logical tensor with one owner,
a format, or the built-in passthrough owner for plain tensors no format uses.
Everything else is a problem that names the tensor and the formats: two owners,
a component used twice, an orphaned scale, an element format nobody decodes,
and (DESIGN invariant 8) quantization no installed format claims.
:func:`compose` (public as :func:`flexq.compose`) wraps it in the
:class:`flexq.ComposedTransform` adapter that Paddle's ``load_transform`` calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from flexq.composition import PASSTHROUGH, Composition, LogicalEntry
from flexq.errors import FormatError, PluginError
from flexq.io.checkpoint import Checkpoint
from flexq.plugin import passthrough
from flexq.plugin.known import PUBLISHED, config_methods, install_hint
from flexq.plugin.manager import ALLOW_ENV, BLOCK_ENV, FormatRegistry, registry
from flexq.transform import ComposedTransform

if TYPE_CHECKING:
    import os

__all__ = [
    "PASSTHROUGH",
    "ComposedTransform",
    "Composition",
    "LogicalEntry",
    "compose",
    "composition_of",
]


def compose(
    path: str | os.PathLike[str] | Checkpoint,
    formats: list[str] | None = None,
    *,
    strict: bool = True,
    allow_unclaimed: bool = False,
) -> ComposedTransform:
    """Compose the installed formats (or exactly ``formats``) over the checkpoint at
    ``path``, as one object with Paddle's ``LoadTransform`` protocol: hand it to
    ``dist.load_state_dict(..., load_transform=...)``, or read the composition it holds
    (``.composition``; its ``entries``, ``plan``, ``load`` ... are forwarded).
    Parameters and errors as :func:`composition_of`'s."""
    return ComposedTransform(
        composition_of(path, formats, strict=strict, allow_unclaimed=allow_unclaimed)
    )


def composition_of(
    path: str | os.PathLike[str] | Checkpoint,
    formats: list[str] | None = None,
    *,
    strict: bool = True,
    allow_unclaimed: bool = False,
    _registry: FormatRegistry = registry,
) -> Composition:
    """The installed formats (or exactly ``formats``) composed over the checkpoint at
    ``path``: what flexq's engines, inspect, convert and verify use.

    :param strict: raise on the first problem (the default); with False the
        problems are collected in ``.problems`` (what ``flexq inspect`` shows).
    :param allow_unclaimed: pass through tensors that look quantized but that no
        installed format claims (packed integers, scales, zero points) instead
        of refusing the checkpoint. Their values are then NOT weights.
    :raises FlexqError: on a malformed checkpoint, a conflict between formats,
        an orphaned component, an element format no installed format decodes,
        or quantization no installed format claims.
    """
    asked = _registry.active(formats)
    ckpt = path if isinstance(path, Checkpoint) else _registry.open_checkpoint(path)
    entries: dict[str, LogicalEntry] = {}
    used: dict[str, str] = {}  # physical key -> logical key using it
    recognized: dict[str, str] = {}  # physical key -> format recognizing it
    methods: dict[str, frozenset[str]] = {}  # format -> the config methods it decodes

    def asking(name: str, question: Callable[[], Any]) -> Any:
        try:
            return question()
        except PluginError:
            # A format disabled for a wrong-typed result is left out when every format
            # is in use (one warning); asked for by name, its error is the answer.
            if formats is not None or not _registry.disabled(name):
                raise
            _registry.warn_disabled(name)
            methods.pop(name, None)
            return None

    def ask(name: str) -> None:
        found = asking(
            name, lambda: (_claims(ckpt, name, _registry), _registry.recognized_keys(name, ckpt))
        )
        if found is None:
            return
        for entry in found[0]:
            _add(ckpt, entries, used, entry, _registry)
        for src in found[1]:
            recognized.setdefault(src, name)

    for name in asked:
        found = asking(name, lambda: _registry.quant_methods(name))  # noqa: B023 - called now
        if found is not None:
            methods[name] = found
    try:
        named: set[str] | None = config_methods(ckpt.quantization_config)
    except FormatError:
        # A malformed config: every format is asked, so the one it is for names what it
        # cannot read (and, if none does, the unclaimed-method check below names the file).
        named = None
    # Entry-point formats the config does not name are asked only when a tensor is
    # left that one of them could own, so a load imports only its own formats.
    # A container a format opened (GGUF) is asked of everyone: its tensors need not look
    # quantized to be that format's.
    later = [
        n
        for n in methods
        if named is not None
        and type(ckpt) is Checkpoint
        and _registry.deferrable(n)
        and methods[n].isdisjoint(named)
    ]
    for name in [n for n in methods if n not in later]:
        ask(name)
    if later and named is not None and _anyone_needed(ckpt, named, methods, used, recognized):
        for name in later:
            if name in methods:
                ask(name)
    names = list(methods)
    problems = _unclaimed_methods(ckpt, methods, entries, _registry, allow_unclaimed)
    plain = _registry.logical_metadata(PASSTHROUGH, ckpt)
    looks: list[tuple[str, str]] = []
    for key, info in ckpt.tensors.items():
        if key in used:
            continue
        if key in recognized:
            problems.append(
                f"{info.file}: tensor {key!r} belongs to format {recognized[key]!r} "
                f"but no logical tensor uses it (orphaned component)"
            )
        elif key not in plain:
            problems.append(
                f"{info.file}: tensor {key!r} has element format {info.dtype}, which no "
                f"format in {names} decodes"
            )
        elif key in entries:
            raise PluginError(
                f"{ckpt.path}: format {entries[key].owner!r} names logical tensor {key!r}, "
                f"which is also an unrelated physical tensor in {info.file}"
            )
        else:
            why = passthrough.looks_quantized(key, info)
            if why is not None and not allow_unclaimed:
                looks.append((key, why))
            meta = plain[key]
            entries[key] = LogicalEntry(key, PASSTHROUGH, meta.shape, meta.dtype, (key,))
    if looks and not problems:
        problems.append(_looks_quantized_problem(ckpt, looks, names))
    if strict and problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise FormatError(problems[0] + more)
    return Composition(ckpt, entries, problems, names, _registry)


def _anyone_needed(
    ckpt: Checkpoint,
    named: set[str],
    methods: Mapping[str, frozenset[str]],
    used: Mapping[str, str],
    recognized: Mapping[str, str],
) -> bool:
    """Whether the deferred formats must be asked too: the config names a method no
    format asked so far decodes, or a tensor nobody took is not plainly a float."""
    if not named <= {m for ms in methods.values() for m in ms}:
        return True
    return any(
        not passthrough.plain_to_every_format(key, info)
        for key, info in ckpt.tensors.items()
        if key not in used and key not in recognized
    )


def _claims(ckpt: Checkpoint, name: str, reg: FormatRegistry) -> list[LogicalEntry]:
    claimed = reg.logical_metadata(name, ckpt)
    return [
        LogicalEntry(key, name, tuple(meta.shape), meta.dtype, reg.source_keys(name, ckpt, key))
        for key, meta in claimed.items()
    ]


def _add(
    ckpt: Checkpoint,
    entries: dict[str, LogicalEntry],
    used: dict[str, str],
    entry: LogicalEntry,
    reg: FormatRegistry,
) -> None:
    key = entry.key
    if key in entries:
        raise PluginError(
            f"{ckpt.path}: logical tensor {key!r} is claimed by formats "
            f"{entries[key].owner!r} and {entry.owner!r} "
            f"({reg.describe(entries[key].owner)}, {reg.describe(entry.owner)})"
        )
    for src in entry.sources:
        if src in used:
            raise PluginError(
                f"{ckpt.path}: tensor {src!r} is a component of both {used[src]!r} "
                f"({entries[used[src]].owner}) and {key!r} ({entry.owner})"
            )
        used[src] = key
    entries[key] = entry


def _unclaimed_methods(
    ckpt: Checkpoint,
    methods: dict[str, frozenset[str]],
    entries: dict[str, LogicalEntry],
    reg: FormatRegistry,
    allow_unclaimed: bool,
) -> list[str]:
    """Problems for config methods no format in use (``methods``: format -> the methods
    it decodes) claims, or whose format found nothing."""
    where = f"{ckpt.path / 'config.json'}: quantization_config"
    names = list(methods)
    # Several formats may claim one method (auto-round writes GPTQ-style integers and
    # NVFP4 under the same quant_method): it is matched when any of them found tensors.
    claimers: dict[str, list[str]] = {}
    for n in names:
        for m in sorted(methods[n]):
            claimers.setdefault(m, []).append(n)
    found = {e.owner for e in entries.values()}
    problems = []
    for method in sorted(config_methods(ckpt.quantization_config, where)):
        owners = claimers.get(method, [])
        if not owners and not allow_unclaimed:
            problems.append(
                f"{where} names quantization method {method!r}, which no format in {names} "
                f"decodes; {_remedy(method, reg)} (or pass allow_unclaimed=True / "
                f"--allow-unclaimed to load its packed tensors as they are)"
            )
        elif owners and found.isdisjoint(owners):
            who = " or ".join(repr(o) for o in owners)
            problems.append(
                f"{where} names quantization method {method!r}, but format {who} found "
                f"none of its tensors in {ckpt.path} (the config does not match the tensors)"
            )
    return problems


def _remedy(method: str, reg: FormatRegistry) -> str:
    """What the user can do to get ``method`` decoded."""
    published = PUBLISHED.get(method)
    if published is None:
        return "flexq has no format for it (a format plugin can add one)"
    ways = []
    for name, dist in published:
        info, setting = reg.info(name), reg.excluded_by_env(name)
        if setting is not None:
            ways.append(
                f"format {name!r} ({dist}) is installed but disabled by {setting} "
                f"(change or unset that variable)"
            )
        elif info is None:
            ways.append(f"{install_hint(dist)} for format {name!r}")
        elif info.error is not None:
            ways.append(f"format {name!r} ({dist}) is installed but failed to load: {info.error}")
        else:
            ways.append(
                f"format {name!r} ({dist}) is installed but not in use (formats=..., "
                f"{ALLOW_ENV} or {BLOCK_ENV})"
            )
    return "; or ".join(ways)


def _looks_quantized_problem(
    ckpt: Checkpoint, looks: list[tuple[str, str]], names: list[str]
) -> str:
    key, why = looks[0]
    more = f" and {len(looks) - 1} more such tensors" if len(looks) > 1 else ""
    return (
        f"{ckpt.info(key).file}: tensor {key!r} looks quantized ({why}){more}, but no format "
        f"in {names} claims it and config.json names no method; pass allow_unclaimed=True / "
        f"--allow-unclaimed to load such tensors as they are"
    )
