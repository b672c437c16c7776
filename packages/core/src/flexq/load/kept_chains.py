"""Which AOA statements lead to which targets: the chain of a load's targets.

For the kept path (:mod:`flexq.load.kept_boxes`, :mod:`flexq.load.api`) and the kept
conversion rules (:mod:`flexq.nn.rules`). Paddle's AOA resolves a fuse's shard
counts by following each name's chain of statements, and loops on a fuse into
another tensor of its own name (Phi-3's ``qkv_proj.weight^T -> qkv_proj.weight,
fused_qkv_old``) when that tensor is not among the targets of the plan. A kept
target is planned alone, and the ordinary targets of a load beside kept ones
without them: each plan takes only the statements on the way to its own targets.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flexq.load.report import LoadOptions

#: an AOA macro (``$LAYER_ID``, ``$EXPERT_ID``) as re.escape writes it; it stands for an index.
_MACRO = re.compile(r"\\\$[A-Z_]+")
#: the bare attributes of Paddle's fuse macros (what ends a statement's destinations).
_FUSES = {"fused_qkv", "fused_qkv_old", "fused_ffn"}


def names(pattern: str) -> re.Pattern[str]:
    """The keys an AOA name (``model.layers.$LAYER_ID.q_proj.weight``) stands for."""
    return re.compile(_MACRO.sub(r"\\d+", re.escape(pattern)))


def leading_to(statements: list[str], keys: list[str]) -> list[str]:
    """The statements on the way to ``keys``: those whose destinations name one and, back
    to front, those that write a source of one already taken (a scratch name). A kept
    target is planned alone, and Paddle's chain resolver loops on a fuse into another
    tensor of its own name (Phi-3's ``qkv_proj.weight^T -> qkv_proj.weight,
    fused_qkv_old``) when that tensor is not among the targets: each plan takes only the
    statements on the way to its own targets."""
    wanted = set(keys)
    # One search over every wanted name a line, not a match per name: a model has
    # thousands of keys, its rules a few macro statements.
    lines = "\n".join(wanted)
    out = []
    for statement in reversed(statements):
        left, arrow, right = statement.partition("->")
        dests = []
        for item in (i.strip() for i in right.split(",")):
            if "=" in item or item in _FUSES:
                break
            dests.append(item)
        macros = [d for d in dests if "$" in d]
        if arrow and (
            any(d in wanted for d in dests)
            or any(re.search(f"^{names(d).pattern}$", lines, re.MULTILINE) for d in macros)
        ):
            out.append(statement)
            new = {s.strip().removesuffix("^T") for s in left.split(",")} - wanted
            wanted |= new
            lines = "\n".join([lines, *new])
    return out[::-1]


def for_ordinary(options: LoadOptions, kept: list[str], rest: list[str]) -> LoadOptions:
    """``options`` for the ordinary targets ``rest`` of a load beside kept targets
    ``kept``: without the statements that lead only to kept targets (see :func:`leading_to`)."""
    statements = list((options.aoa_config or {}).get("aoa_statements", []))
    if not statements or not kept:
        return options
    to_kept = set(leading_to(statements, kept))
    to_rest = set(leading_to(statements, rest))
    mine = [s for s in statements if s not in to_kept or s in to_rest]
    return replace(options, aoa_config={**(options.aoa_config or {}), "aoa_statements": mine})
