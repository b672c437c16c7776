"""Describe the caller's load targets: which box of which global tensor each one holds.

For :func:`flexq.load_state_dict`. Accepts every kind of target FlexCheckpoint
accepts: plain ``paddle.Tensor`` (the whole tensor), dist tensors from
``dist.shard_tensor`` (their local value, with shape and offset from the
placements; skipped on ranks outside their mesh), ``ShardedWeight``, and nested
dicts of these (keys joined with ``.``). Parameters created under
``paddle.LazyGuard`` (PaddleFormers builds models that way) have no storage yet:
they are marked ``lazy`` and allocated by the load once every check has passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


def flatten(state_dict: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"w": t}}`` -> ``{"model.w": t}``."""
    flat: dict[str, Any] = {}
    for key, value in state_dict.items():
        if not isinstance(key, str):
            raise TargetError(f"state_dict key {key!r} is not a string")
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def describe(state_dict: Mapping[str, Any]) -> list[Target]:
    """The targets of ``state_dict`` this rank writes, in key order."""
    import paddle
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight
    from paddle.distributed.flex_checkpoint.dcp.utils import (
        compute_local_shape_and_global_offset,
    )

    out = []
    for key, value in sorted(flatten(state_dict).items()):
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


def _lazy(tensor: Any) -> bool:
    """True for a tensor without storage (a parameter created under ``paddle.LazyGuard``)."""
    return not tensor._is_initialized()
