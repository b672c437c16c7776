"""The model's AOA conversion rules, adjusted for kept targets.

For :func:`flexq.paddleformers.load` with kept weights: PaddleFormers' rules move
a Linear's ``[out, in]`` checkpoint weight into Paddle's ``[in, out]`` with ``^T``
and name every tensor with identity statements; a kept weight stays ``[out, in]``
and loads by its logical name, so :func:`for_kept` takes those out for kept targets.
"""

from __future__ import annotations

import re
from typing import Any

from flexq.errors import TargetError
from flexq.load.kept import QuantizedTarget

#: an AOA macro (``$LAYER_ID``, ``$EXPERT_ID``) as re.escape writes it; it stands for an index.
_MACRO = re.compile(r"\\\$[A-Z_]+")


def for_kept(aoa_config: dict[str, Any], state_dict: dict[str, Any]) -> dict[str, Any]:
    """``aoa_config`` adjusted for the kept targets of ``state_dict`` (:func:`targets`):
    where a statement's destination names only kept targets, an identity ``X -> X`` or
    ``X^T -> X`` is dropped (a kept target loads by its logical name) and ``X^T -> Y``
    becomes ``X -> Y``: the model's rules transpose a Linear's ``[out, in]`` checkpoint
    weight into Paddle's ``[in, out]``; a kept weight stays ``[out, in]``.

    :raises TargetError: on one statement that moves kept and ordinary targets alike
        (it cannot both transpose and not).
    """
    kept = {k for k, v in state_dict.items() if isinstance(v, QuantizedTarget)}
    if not kept:
        return aoa_config
    out = []
    for statement in aoa_config.get("aoa_statements", []):
        left, arrow, right = statement.partition("->")
        dest = right.split(",")[0].strip()
        src = left.strip()
        if arrow and dest and src.removesuffix("^T") == dest and "," not in right:
            hits = _named(dest, state_dict)
            if hits and hits <= kept:
                continue  # a kept key loads by its logical name: the identity is not needed
        if arrow and src.endswith("^T") and dest:
            hits = _named(dest, state_dict)
            if hits and hits <= kept:
                statement = f"{left.strip()[:-2]} ->{right}"
            elif hits & kept:
                raise TargetError(
                    f"keep_quantized: AOA statement {statement!r} moves kept weights "
                    f"{sorted(hits & kept)[:2]} and ordinary ones {sorted(hits - kept)[:2]}; "
                    "keep all of them or none"
                )
        out.append(statement)
    return {**aoa_config, "aoa_statements": out}


def _named(dest: str, state_dict: dict[str, Any]) -> set[str]:
    """The keys of ``state_dict`` an AOA destination (macros expanded) names."""
    named = re.compile(_MACRO.sub(r"\\d+", re.escape(dest)))
    return {k for k in state_dict if isinstance(k, str) and named.fullmatch(k)}
