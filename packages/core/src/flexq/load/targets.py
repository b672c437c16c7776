"""Describe the caller's load targets: which box of which global tensor each one holds.

For :func:`flexq.load_state_dict`. Accepts every kind of target FlexCheckpoint
accepts: plain ``paddle.Tensor`` (the whole tensor), dist tensors from
``dist.shard_tensor`` (their local value, with shape and offset from the
placements; skipped on ranks outside their mesh), ``ShardedWeight``, nested
dicts of these (keys joined with ``.``), and FlexCheckpoint's multi-shard form: a
flat dict keyed by ``(name, global_offset)`` tuples whose values are the
ShardedWeights of that name at that offset, so one rank holds several boxes of one
tensor (they must not overlap: each element is written once). Parameters created under
``paddle.LazyGuard`` (PaddleFormers builds models that way) have no storage yet:
they are marked ``lazy`` and allocated by the load once every check has passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, overload

from flexq.errors import TargetError
from flexq.io.dtypes import paddle_dtype_name


@dataclass(frozen=True)
class Target:
    """One target shard: ``tensor`` holds the box ``offset`` + ``local_shape`` of ``key``.

    :ivar lazy: the tensor has no storage yet (a parameter created under
        ``paddle.LazyGuard``): the load gives it storage once every check has passed.
    """

    key: str
    tensor: Any
    global_shape: tuple[int, ...]
    local_shape: tuple[int, ...]
    offset: tuple[int, ...]
    dtype: str
    lazy: bool = False

    @property
    def sharded(self) -> Any:
        """Paddle's ShardedWeight over the tensor this target writes into."""
        from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

        return ShardedWeight(
            self.key, self.tensor, self.local_shape, self.global_shape, self.offset
        )


#: A flat target key: a name, or FlexCheckpoint's ``(name, global_offset)`` of one shard.
FlatKey = str | tuple[str, tuple[int, ...]]


@overload
def flatten(state_dict: Mapping[str, Any], prefix: str = "") -> dict[str, Any]: ...
@overload
def flatten(state_dict: Mapping[Any, Any], prefix: str = "") -> dict[FlatKey, Any]: ...
def flatten(state_dict: Mapping[Any, Any], prefix: str = "") -> dict[Any, Any]:
    """``{"model": {"w": t}}`` -> ``{"model.w": t}``; ``(name, offset)`` keys stay as they are
    (a string-keyed state dict flattens to string keys)."""
    flat: dict[FlatKey, Any] = {}
    for key, value in state_dict.items():
        if isinstance(key, tuple):
            flat[_shard_key(key, value, prefix)] = value
            continue
        if not isinstance(key, str):
            raise TargetError(
                f"state_dict key {key!r} is neither a string nor FlexCheckpoint's "
                "(name, global_offset) tuple of a ShardedWeight"
            )
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _shard_key(key: tuple[Any, ...], value: Any, prefix: str) -> tuple[str, tuple[int, ...]]:
    """A ``(name, global_offset)`` key checked against the ShardedWeight it keys (Paddle's
    loader finds a shard's tensor by exactly that pair, so a mismatch would lose it)."""
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

    well_formed = (
        not prefix
        and len(key) == 2
        and isinstance(key[0], str)
        and isinstance(key[1], tuple)
        and all(isinstance(o, int) for o in key[1])
    )
    if not well_formed:
        raise TargetError(
            f"state_dict key {key!r}: a tuple key must be FlexCheckpoint's (name, "
            "global_offset) of a ShardedWeight, at the top level of the state dict"
        )
    if not isinstance(value, ShardedWeight):
        raise TargetError(
            f"state_dict key {key!r} holds a {type(value).__name__}; a (name, global_offset) "
            "key must hold the ShardedWeight of that shard"
        )
    if value.key != key[0] or tuple(value.global_offset) != key[1]:
        raise TargetError(
            f"state_dict key {key!r} holds the ShardedWeight of {value.key!r} at offset "
            f"{tuple(value.global_offset)}; key it ({value.key!r}, "
            f"{tuple(value.global_offset)})"
        )
    return key[0], key[1]


def _order(item: tuple[FlatKey, Any]) -> tuple[str, tuple[int, ...]]:
    key = item[0]
    return (key, ()) if isinstance(key, str) else key


def describe(state_dict: Mapping[Any, Any]) -> list[Target]:
    """The targets of ``state_dict`` this rank writes, in key order (the shards of one
    name in offset order)."""
    out = _describe(state_dict)
    _check_disjoint(out)
    return out


def _describe(state_dict: Mapping[Any, Any]) -> list[Target]:
    import paddle
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight
    from paddle.distributed.flex_checkpoint.dcp.utils import (
        compute_local_shape_and_global_offset,
    )

    out = []
    for flat_key, value in sorted(flatten(state_dict).items(), key=_order):
        key = flat_key if isinstance(flat_key, str) else flat_key[0]
        if isinstance(value, ShardedWeight):
            tensor = value.local_tensor
            out.append(
                Target(
                    key,
                    tensor,
                    tuple(value.global_shape),
                    tuple(value.local_shape),
                    tuple(value.global_offset),
                    paddle_dtype_name(tensor.dtype),
                    _lazy(tensor),
                )
            )
        elif isinstance(value, paddle.Tensor) and value.is_dist():
            shape = tuple(value.shape)
            local_shape, offset = compute_local_shape_and_global_offset(
                list(shape), value.process_mesh, value.placements
            )
            if local_shape is None:
                continue  # this rank is not on the tensor's mesh
            local = value._local_value()
            if _lazy(local):
                raise TargetError(
                    f"target {key!r}: a dist tensor without storage (created under "
                    "paddle.LazyGuard); initialize it before loading"
                )
            out.append(
                Target(
                    key,
                    local,
                    shape,
                    tuple(local_shape),
                    tuple(offset),
                    paddle_dtype_name(local.dtype),
                )
            )
        elif isinstance(value, paddle.Tensor):
            shape = tuple(value.shape)
            dtype = paddle_dtype_name(value.dtype)
            out.append(Target(key, value, shape, shape, (0,) * len(shape), dtype, _lazy(value)))
        else:
            raise TargetError(
                f"target {key!r} is a {type(value).__name__}, not a paddle.Tensor, "
                "dist tensor or ShardedWeight"
            )
    return out


def _check_disjoint(targets: list[Target]) -> None:
    """Raise TargetError when the shards of one name disagree on the tensor's shape or
    overlap (an element written twice, or the same shard listed under two keys)."""
    by_key: dict[str, list[Target]] = {}
    for t in targets:
        by_key.setdefault(t.key, []).append(t)
    for key, shards in by_key.items():
        for i, a in enumerate(shards):
            for b in shards[i + 1 :]:
                if a.global_shape != b.global_shape:
                    raise TargetError(
                        f"target {key!r}: its shards give global shapes {list(a.global_shape)} "
                        f"and {list(b.global_shape)}; every shard of one tensor names the same"
                    )
                if _overlap(a, b):
                    raise TargetError(
                        f"target {key!r}: the shards at offsets {a.offset} (shape "
                        f"{list(a.local_shape)}) and {b.offset} (shape {list(b.local_shape)}) "
                        "overlap; give each element of a tensor to one shard of a rank"
                    )


def _overlap(a: Target, b: Target) -> bool:
    return all(
        x < y + m and y < x + n
        for x, n, y, m in zip(a.offset, a.local_shape, b.offset, b.local_shape, strict=True)
    )


def _lazy(tensor: Any) -> bool:
    """True for a tensor without storage (a parameter created under ``paddle.LazyGuard``)."""
    return not tensor._is_initialized()
