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
from flexq.load.kept_chains import names


def for_kept(aoa_config: dict[str, Any], state_dict: dict[str, Any]) -> dict[str, Any]:
    """``aoa_config`` adjusted for the kept targets of ``state_dict`` (:func:`targets`):
    where a statement's destination names only kept targets, an identity ``X -> X`` or
    ``X^T -> X`` is dropped (a kept target loads by its logical name) and ``X^T -> Y``
    becomes ``X -> Y``: the model's rules transpose a Linear's ``[out, in]`` checkpoint
    weight into Paddle's ``[in, out]``; a kept weight stays ``[out, in]``. A fuse
    (``q^T, k^T, v^T -> qkv, fused_qkv, ...``, ``fused_ffn``, ``fused_qkv_old``, a plain
    concatenation) loses every ``^T`` and its ``axis`` (default 1) names the same
    logical axis in the untransposed layout (``axis=0`` for a linear's outputs), so the
    pieces, head-group interleave included, land where they land for a dequantized
    weight, in kept orientation.

    :raises TargetError: on one statement that moves kept and ordinary targets alike
        (it cannot both transpose and not), or transposes some of a kept fuse's
        sources and not others.
    """
    kept = {k for k, v in state_dict.items() if isinstance(v, QuantizedTarget)}
    if not kept:
        return aoa_config
    out = []
    for statement in aoa_config.get("aoa_statements", []):
        left, arrow, right = statement.partition("->")
        dest, _, attributes = right.partition(",")
        dest = dest.strip()
        sources = [s.strip() for s in left.split(",")]
        if arrow and dest and len(sources) == 1 and sources[0].removesuffix("^T") == dest:
            hits = _named(dest, state_dict)
            if hits and hits <= kept and not attributes:
                continue  # a kept key loads by its logical name: the identity is not needed
        transposed = [s.endswith("^T") for s in sources]
        if arrow and dest and any(transposed):
            hits = _named(dest, state_dict)
            if hits and hits <= kept:
                if not all(transposed):
                    raise TargetError(
                        f"keep_quantized: AOA statement {statement!r} transposes some of the "
                        f"sources of kept {sorted(hits)[:2]} and not others; a kept weight "
                        "stays [out, in] throughout: load without keep_quantized"
                    )
                plain = [s.removesuffix("^T") for s in sources]
                if attributes or len(sources) > 1:
                    # A fuse into its own name (Phi-3's qkv_proj) goes through a scratch
                    # name, as ^T went through Paddle's X_transpose_tmp (an identity
                    # permute, as ^T is a permute): AOA refuses X -> X.
                    for s in plain:
                        if s == dest:
                            identity = list(range(_rank(state_dict[min(hits)])))
                            out.append(f'{s} -> {s}{_SCRATCH}, permute = "{identity}"')
                    plain = [f"{s}{_SCRATCH}" if s == dest else s for s in plain]
                    rank = _rank(state_dict[min(hits)])
                    attributes = f", {_untransposed_axis(attributes, rank)}"
                statement = f"{', '.join(plain)} -> {dest}{attributes}"
            elif hits & kept:
                raise TargetError(
                    f"keep_quantized: AOA statement {statement!r} moves kept weights "
                    f"{sorted(hits & kept)[:2]} and ordinary ones {sorted(hits - kept)[:2]}; "
                    "keep all of them or none"
                )
        out.append(statement)
    return {**aoa_config, "aoa_statements": out}


#: a statement's ``axis=N`` attribute.
_AXIS = re.compile(r"axis\s*=\s*(\d+)")
#: suffix of the scratch name a fuse into its own name goes through.
_SCRATCH = "_kept_tmp"
#: the axis Paddle's fuse and concatenation macros take when a statement names none.
_DEFAULT_AXIS = 1


def _untransposed_axis(attributes: str, rank: int) -> str:
    """A transposed fuse's attributes with its axis named in the untransposed layout
    (``^T`` swaps the last two axes)."""
    found = _AXIS.search(attributes)
    axis = int(found.group(1)) if found else _DEFAULT_AXIS
    flipped = {rank - 1: rank - 2, rank - 2: rank - 1}.get(axis, axis)
    others = [a.strip() for a in attributes.split(",") if a.strip() and not _AXIS.match(a.strip())]
    return ", ".join([*others, f"axis={flipped}"])


def _rank(target: QuantizedTarget) -> int:
    """The rank of a kept target's values (a tensor, dist tensor or ShardedWeight)."""
    values = target.values
    shape = getattr(values, "global_shape", None)
    return len(shape if shape is not None else values.shape)


def _named(dest: str, state_dict: dict[str, Any]) -> set[str]:
    """The keys of ``state_dict`` an AOA destination (macros expanded) names."""
    named = names(dest)
    return {k for k in state_dict if isinstance(k, str) and named.fullmatch(k)}
