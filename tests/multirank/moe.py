"""A tiny DeepSeek-shaped block-FP8 MoE layer for the multi-rank tests, and its parallel layouts.

The checkpoint (:func:`write`) has what makes DeepSeek-V3 hard to shard: routed
experts, a shared expert whose width (:data:`SHARED`, 384 = 3 blocks of 128)
cuts 128x128 scale blocks on 2- and 4-way splits, an attention projection split
by columns and one by rows, and replicated BF16 tensors (norm, router). The
files hold: attention and norms, the shared expert, experts 0-1, experts 2-3.

:func:`boxes` says, from nothing but arithmetic on the shapes, which box of
which tensor a rank holds in each layout; the worker builds the same layouts
from Paddle placements, so a test comparing the two checks Paddle, AOA and
flexq's engines together.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import flexq
from flexq.formatkit.rounding import float32_to_bfloat16_bits

HIDDEN = 256
EXPERTS = 4
INTER = 128
SHARED = 384
BLOCK = 128
L0 = "model.layers.0"
NORM = f"{L0}.input_layernorm.weight"
ROUTER = f"{L0}.mlp.gate.weight"
Q_PROJ = f"{L0}.self_attn.q_proj.weight"
O_PROJ = f"{L0}.self_attn.o_proj.weight"
SHARED_KEYS = {
    p: f"{L0}.mlp.shared_experts.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")
}


def expert_keys(e: int) -> dict[str, str]:
    """Projection name -> key of expert ``e``'s weights."""
    return {p: f"{L0}.mlp.experts.{e}.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")}


#: Key -> global shape of every FP8 weight ([out, in]); column-parallel ones are split by
#: rows (Shard(0)), row-parallel ones (o_proj, down_proj) by columns (Shard(1)).
FP8: dict[str, tuple[int, int]] = {
    Q_PROJ: (HIDDEN, HIDDEN),
    O_PROJ: (HIDDEN, HIDDEN),
    SHARED_KEYS["gate_proj"]: (SHARED, HIDDEN),
    SHARED_KEYS["up_proj"]: (SHARED, HIDDEN),
    SHARED_KEYS["down_proj"]: (HIDDEN, SHARED),
    **{
        k: ((INTER, HIDDEN) if p != "down_proj" else (HIDDEN, INTER))
        for e in range(EXPERTS)
        for p, k in expert_keys(e).items()
    },
}
#: BF16 tensors every layout replicates.
BF16: dict[str, tuple[int, ...]] = {NORM: (HIDDEN,), ROUTER: (EXPERTS, HIDDEN)}
#: The file (shard number) of each weight: attention + norms, shared expert, experts 0-1, 2-3.
FILE_OF = {
    **{k: 0 for k in (Q_PROJ, O_PROJ, NORM, ROUTER)},
    **{k: 1 for k in SHARED_KEYS.values()},
    **{k: 2 + e // 2 for e in range(EXPERTS) for k in expert_keys(e).values()},
}
LAYOUTS = ("tp", "ep", "tpxep", "dp")
Box = tuple[tuple[int, ...], tuple[int, ...]]  # (global offset, local shape)


def write(directory: Path, seed: int = 0) -> Path:
    """The checkpoint, quantized by the FP8 format's own encoder."""
    from flexq_fp8.encode import save_fp8_checkpoint

    rng = np.random.default_rng(seed)
    weights = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in FP8.items()}
    others = {
        k: flexq.RawTensor("BF16", float32_to_bfloat16_bits(rng.uniform(0.5, 1.5, shape)))
        for k, shape in BF16.items()
    }
    shard_of = {**FILE_OF, **{k + "_scale_inv": n for k, n in FILE_OF.items() if k in FP8}}
    return save_fp8_checkpoint(directory, weights, others=others, shard_of=shard_of)


def is_row_parallel(key: str) -> bool:
    """o_proj and down_proj are split by columns (their input dimension)."""
    return key == O_PROJ or key.endswith("down_proj.weight")


def _split(shape: tuple[int, ...], axis: int, parts: int, index: int) -> Box:
    step = shape[axis] // parts
    offset = tuple(index * step if a == axis else 0 for a in range(len(shape)))
    local = tuple(step if a == axis else n for a, n in enumerate(shape))
    return offset, local


def _whole(shape: tuple[int, ...]) -> Box:
    return (0,) * len(shape), shape


def _tp(key: str, parts: int, index: int) -> Box:
    return _split(FP8[key], 1 if is_row_parallel(key) else 0, parts, index)


def boxes(layout: str, world: int, rank: int) -> dict[str, Box]:
    """Key -> the box rank ``rank`` of ``world`` holds in ``layout``.

    - ``tp``: attention and shared expert split ``world`` ways, experts not loaded;
    - ``ep``: the experts ``rank`` owns (``EXPERTS / world`` each), whole;
    - ``tpxep`` (4 ranks, mesh ``[[0, 1], [2, 3]]`` = ep x tp): experts split over
      ``ep`` (two per group), each one and the attention / shared expert split over ``tp``;
    - ``dp``: every tensor whole on every rank.
    Replicated BF16 tensors (norm, router) are in every layout.
    """
    out = {k: _whole(s) for k, s in BF16.items()}
    dense = [Q_PROJ, O_PROJ, *SHARED_KEYS.values()]
    if layout == "tp":
        out.update({k: _tp(k, world, rank) for k in dense})
    elif layout == "ep":
        per = EXPERTS // world
        for e in range(rank * per, (rank + 1) * per):
            out.update({k: _whole(FP8[k]) for k in expert_keys(e).values()})
    elif layout == "tpxep":
        group, tp = divmod(rank, 2)
        out.update({k: _tp(k, 2, tp) for k in dense})
        for e in (2 * group, 2 * group + 1):
            out.update({k: _tp(k, 2, tp) for k in expert_keys(e).values()})
    elif layout == "dp":
        out.update({k: _whole(s) for k, s in FP8.items()})
    else:
        raise ValueError(f"unknown layout {layout!r}")
    return out


def multishard_boxes(world: int, rank: int) -> dict[str, list[Box]]:
    """Key -> the two boxes rank ``rank`` holds of each multi-shard (tuple-keyed) target:
    chunks ``rank`` and ``rank + world`` of ``2 * world`` (q_proj by rows, the shared
    down_proj by columns, so the chunks cut scale blocks)."""
    parts = 2 * world
    return {
        k: [_tp(k, parts, rank), _tp(k, parts, rank + world)]
        for k in (Q_PROJ, SHARED_KEYS["down_proj"])
    }


def box_bytes(key: str, box: Box) -> int:
    """Bytes a rank must read for ``box`` of ``key``: its elements, plus for an FP8 weight
    the F32 scale of every 128x128 block the box touches."""
    offset, shape = box
    if key in BF16:
        return 2 * math.prod(shape)
    blocks = math.prod(
        -(-(o + n) // BLOCK) - o // BLOCK for o, n in zip(offset, shape, strict=True)
    )
    return math.prod(shape) + 4 * blocks


def file_bytes(key: str) -> int:
    """Bytes of a whole tensor (and its scales): what a rank holding it whole reads."""
    shape = FP8.get(key) or BF16[key]
    return box_bytes(key, _whole(shape))
