"""TEST FIXTURE, never shipped: a stand-in for upstream Paddle's ``load_transform`` loader.

Paddle PR #79712 (stored revision 1df2c128 of PaddlePaddle/Paddle) adds
``load_state_dict(..., load_transform=...)``; released Paddle 3.3.1 lacks it.
This module is our own code, written from reading that revision, and built on
3.3.1's parts (its ``load_state_dict_impl``, ``AOAEngine``, ``ShardedWeight``,
metadata types and ``assign_sharded_slice``). It calls a transform exactly as
upstream does, so flexq's :class:`ComposedTransform` can be held to it:

1. Targets whose key is a logical key (``logical_metadata()``) are split off.
   Per logical key, the build phase calls ``read_plan(key, target_metadata,
   force_global=...)`` once, for the first target, with ``force_global=True``
   when the key's targets disagree on their shard. A dist tensor is described
   by its GLOBAL shape (1df2c128 reads ``target.shape``).
2. For "local" plans it reads ``plan.source_slices[src].global_offset`` and
   ``.local_shape`` AS ATTRIBUTES; every other source is read whole. Physical
   component targets (ShardedWeight) are built from that, in the dtype of the
   checkpoint metadata. A component key equal to a passthrough target key is a
   ``ValueError``.
3. I/O and resharding run through 3.3.1's ``load_state_dict_impl``, with
   ``paddle.float8_e4m3fn`` / ``float8_e8m0fnu`` and their numpy names aliased
   to uint8 (F8 payloads travel as raw bytes), restored afterwards.
4. The apply phase calls ``apply(key, sources, dtype)`` with the LOGICAL dtype
   from ``logical_metadata()``. The output counts as local only when the
   transform also has ``read_plan_for(key)`` returning a "local" plan
   (1df2c128); otherwise the target's box is sliced out of it (so a local
   output on a rank whose shard does not start at 0 yields an empty piece).
   Then ``paddle.assign(piece, target)``: on 3.3.1 that rebinds the target's
   dtype and shape to the piece's, silently.
5. AOA runs only when every target is a ShardedWeight (otherwise it is ignored,
   as upstream and 3.3.1 do, and renamed keys end in a KeyError). Its source
   info has the component keys removed and the logical keys added as whole
   tensors of the logical dtype, so 3.3.1's AOAEngine refuses a logical dtype
   that differs from the target's unless the statement casts.
   What AOA maps is loaded keyed by (source key, offset of the box), so two
   targets fed from boxes of one tensor that start at the same offset overwrite
   each other there, and one of them is never written.
6. With ``safetensors=True`` and no ``*.metadata`` in ``path``, metadata is
   generated and WRITTEN INTO ``path`` (``flex-ckpt.auto_generated.metadata``),
   with upstream's storage dtype table: F8 formats as uint8, unregistered
   formats (F4, ...) a ``ValueError`` naming the format.

Not reproduced: key validation reports, flattened (sharding-stage) shards,
``mw_name_compatibility`` renames of transform targets.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
from paddle.distributed.flex_checkpoint.aoa.aoa_engine import AOAEngine
from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd
from paddle.distributed.flex_checkpoint.dcp.metadata import (
    LocalTensorIndex,
    LocalTensorMetadata,
    Metadata,
)
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import (
    ShardedWeight,
    ShardedWeightDesc,
    make_replicated_sharded_weight,
)
from paddle.distributed.flex_checkpoint.dcp.utils import (
    assign_sharded_slice,
    build_global_state_shard_info,
    build_shard_desc,
    flatten_state_dict,
    is_sharded_state_dict,
)
from safetensors import safe_open

#: 3.3.1's own functions, captured before any test patches the module.
PADDLE_LOAD = lsd.load_state_dict
PADDLE_IMPL = lsd.load_state_dict_impl
METADATA_NAME = "flex-ckpt.auto_generated.metadata"

#: safetensors storage format -> Paddle dtype name (upstream's table; F8 as raw bytes).
STORAGE_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32",
    "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
    "F64": "float64", "F8_E4M3": "uint8", "F8_E4M3FN": "uint8", "F8_E8M0": "uint8",
}  # fmt: skip
_ALIASES = (
    (paddle, "float8_e4m3fn", paddle.uint8),
    (paddle, "float8_e8m0fnu", paddle.uint8),
    (np, "float8_e4m3fn", np.uint8),
    (np, "float8_e8m0fnu", np.uint8),
)


def has_load_transform(fn: Any) -> bool:
    """Whether ``fn`` (a ``load_state_dict``) takes ``load_transform=``: how flexq detects it."""
    return "load_transform" in inspect.signature(fn).parameters


def storage_dtype(storage_format: str) -> str:
    """Upstream's ``_safetensors_storage_dtype``: the dtype a stored tensor travels as."""
    try:
        return STORAGE_DTYPES[storage_format]
    except KeyError:
        raise ValueError(f"safetensors format {storage_format} is not supported") from None


def load_state_dict(
    state_dict: dict[Any, Any],
    path: str,
    process_group: Any = None,
    coordinator_rank: int = 0,
    unique_id: int | None = None,
    offload: bool = False,
    mw_name_compatibility: bool = True,
    aoa_config: dict[str, list[str]] | None = None,
    safetensors: bool = False,
    worker_groups: Any = None,
    comm_method: str = "broadcast",
    load_transform: Any = None,
) -> None:
    """``paddle.distributed.load_state_dict`` as upstream 1df2c128 runs it with a transform."""
    if load_transform is None:
        PADDLE_LOAD(
            state_dict, path, process_group, coordinator_rank, unique_id, offload,
            mw_name_compatibility, aoa_config, safetensors, worker_groups, comm_method,
        )  # fmt: skip
        return
    io = {
        "process_group": process_group,
        "coordinator_rank": coordinator_rank,
        "unique_id": unique_id,
        "offload": offload,
        "safetensors": safetensors,
        "worker_groups": worker_groups,
        "comm_method": comm_method,
    }
    use_dist = dist.get_world_size() > 1
    if use_dist:
        dist.barrier(process_group)
    if not is_sharded_state_dict(state_dict, use_dist, process_group):
        _impl(state_dict, path, load_transform, io)  # AOA is ignored here, as upstream
    else:
        load_dict = dict(state_dict)
        if use_dist:
            destination = build_global_state_shard_info(state_dict, process_group)
        else:
            for key, val in load_dict.items():
                assert val.local_shape == val.global_shape, f"{key} is not replicated!"
            destination = defaultdict(list)
            for key, val in load_dict.items():
                destination[key].append(build_shard_desc(val))
        if aoa_config is not None:
            _handle_aoa(load_dict, destination, path, aoa_config, load_transform, io)
        else:
            _impl(load_dict, path, load_transform, io)
    # Like upstream, a load that raises leaves this module-level cache populated.
    lsd._metadata_manager.clear()


def _handle_aoa(
    load_dict: dict[str, ShardedWeight],
    destination: dict[str, list[ShardedWeightDesc]],
    path: str,
    aoa_config: dict[str, list[str]],
    transform: Any,
    io: dict[str, Any],
) -> None:
    """AOA over logical keys: map each target to source slices, load those, assign back."""
    metadata = _metadata(path, io)
    logical = transform.logical_metadata()
    components = {s for key in logical for s in transform.source_keys(key)}
    source = {
        key: [
            ShardedWeightDesc(
                key, tuple(m.local_shape), tuple(m.global_shape), tuple(m.global_offset), m.dtype
            )
            for m in metas
        ]
        for key, metas in metadata.state_dict_metadata.items()
        if key not in components
    }
    for key, m in logical.items():
        shape = tuple(m.global_shape)
        source[key] = [ShardedWeightDesc(key, shape, shape, (0,) * len(shape), m.dtype)]
    engine = AOAEngine(
        source_state_shard_info=source,
        destination_state_shard_info=destination,
        aoa_config=aoa_config,
    )
    new_load_dict: dict[tuple[str, tuple[int, ...]], ShardedWeight] = {}
    temps: list[tuple[Any, Any, ShardedWeight, Any]] = []
    for _, target in sorted(load_dict.items()):
        mappings = engine.find_shard_sources(build_shard_desc(target))
        for m in mappings:
            src, dst = m.source_slice, m.target_slice
            idx = (src.key, tuple(src.global_offset))
            direct = (
                len(mappings) == 1
                and (src.local_shape, src.global_shape, src.global_offset, src.dtype)
                == (dst.local_shape, dst.global_shape, dst.global_offset, dst.dtype)
                and m.postprocess_list is None
            )
            tensor = target.local_tensor if direct else paddle.empty(src.local_shape, src.dtype)
            new_load_dict[idx] = ShardedWeight(
                src.key, tensor, src.local_shape, src.global_shape, src.global_offset
            )
            if not direct:
                temps.append((src, dst, new_load_dict[idx], m.postprocess_list))
    _impl(new_load_dict, path, transform, io)
    for src, dst, loaded, post in temps:
        assign_sharded_slice(src, loaded, dst, load_dict[dst.key], post)


def _name(state_key: Any) -> str:
    return str(state_key[0] if isinstance(state_key, tuple) else state_key)


def _impl(state_dict: dict[Any, Any], path: str, transform: Any, io: dict[str, Any]) -> None:
    """Split off the transform's targets, load passthrough + components, apply."""
    if isinstance(next(iter(state_dict), None), tuple):
        flat = state_dict
    else:
        flat, _ = flatten_state_dict(state_dict)
    metadata = _metadata(path, io)
    logical = transform.logical_metadata()
    transformed = {k: v for k, v in flat.items() if _name(k) in logical}
    passthrough = {k: v for k, v in flat.items() if _name(k) not in logical}
    components = _components(transformed, metadata, transform, io["offload"])
    collisions = {_name(k) for k in passthrough} & {_name(k) for k in components}
    if collisions:
        raise ValueError(
            "Physical load transform components conflict with passthrough target "
            f"tensors: {sorted(collisions)}."
        )
    with _uint8_transport():
        PADDLE_IMPL({**passthrough, **components}, path, **io)
    if transformed:
        _apply(transformed, components, transform)


def _shard_metadata(target: Any) -> LocalTensorMetadata:
    """Upstream's ``_target_shard_metadata`` at 1df2c128 (dist tensors by global shape)."""
    if isinstance(target, ShardedWeight):
        return LocalTensorMetadata(
            global_shape=tuple(target.global_shape),
            local_shape=tuple(target.local_shape),
            global_offset=tuple(target.global_offset),
            dtype=str(target.local_tensor.dtype).removeprefix("paddle."),
        )
    shape = tuple(target.shape)
    return LocalTensorMetadata(
        global_shape=shape,
        local_shape=shape,
        global_offset=(0,) * len(shape),
        dtype=str(target.dtype).removeprefix("paddle."),
    )


def _components(
    transformed: dict[Any, Any], metadata: Metadata, transform: Any, offload: bool
) -> dict[Any, ShardedWeight]:
    """Build-phase plans, then one ShardedWeight per physical component to read."""
    tuple_keys = any(isinstance(k, tuple) for k in transformed)
    by_key: dict[str, list[Any]] = defaultdict(list)
    for state_key, target in transformed.items():
        by_key[_name(state_key)].append(target)
    sources = {key: tuple(transform.source_keys(key)) for key in by_key}
    plans = {}
    for key, targets in by_key.items():
        metas = [_shard_metadata(t) for t in targets]
        force_global = any(m != metas[0] for m in metas[1:])
        read_plan = getattr(transform, "read_plan", None)
        if callable(read_plan):
            plans[key] = read_plan(key, _shard_metadata(targets[0]), force_global=force_global)
    local = {
        src: plan.source_slices[src]
        for key, plan in plans.items()
        if getattr(plan, "mode", "global") == "local"
        for src in sources[key]
    }
    out: dict[Any, ShardedWeight] = {}
    for src in sorted({s for keys in sources.values() for s in keys}):
        meta = metadata.state_dict_metadata[src][0]
        global_shape = tuple(meta.global_shape)
        local_shape, offset = global_shape, (0,) * len(global_shape)
        box = local.get(src)
        if box is not None:
            local_shape, offset = tuple(box.local_shape), tuple(box.global_offset)
        tensor = paddle.empty(local_shape, dtype=meta.dtype)
        if offload:
            tensor = tensor.cpu()
        state_key = (src, offset) if tuple_keys else src
        out[state_key] = (
            make_replicated_sharded_weight(src, tensor)
            if box is None
            else ShardedWeight(src, tensor, local_shape, global_shape, offset)
        )
    return out


def _apply(
    transformed: dict[Any, Any], components: dict[Any, ShardedWeight], transform: Any
) -> None:
    """Upstream's ``_apply_load_transform`` at 1df2c128."""
    logical = transform.logical_metadata()
    by_key: dict[str, list[Any]] = defaultdict(list)
    for state_key, target in transformed.items():
        by_key[_name(state_key)].append(target)
    loaded = {_name(k): v for k, v in components.items()}
    for key in sorted(by_key):
        meta = logical[key]
        plan = getattr(transform, "read_plan_for", lambda _key: None)(key)
        is_local = getattr(plan, "mode", "global") == "local"
        sources = {s: loaded[s].local_tensor for s in transform.source_keys(key)}
        dtype = getattr(paddle, str(meta.dtype).removeprefix("paddle."), None)
        if dtype is None:
            raise ValueError(f"Unsupported transformed output dtype {meta.dtype!r}.")
        output = transform.apply(key, sources, dtype)
        for target in by_key[key]:
            if isinstance(target, ShardedWeight):
                tensor = target.local_tensor
                shape, offset = tuple(target.local_shape), tuple(target.global_offset)
            else:
                tensor, shape = target, tuple(target.shape)
                offset = (0,) * len(shape)
            piece = output
            if not is_local:
                piece = paddle.slice(
                    output,
                    axes=list(range(len(meta.global_shape))),
                    starts=list(offset),
                    ends=[o + n for o, n in zip(offset, shape, strict=True)],
                )
            if piece.place != tensor.place:
                piece = piece.to(tensor.place)
            paddle.assign(piece, tensor)


def _metadata(path: str, io: dict[str, Any]) -> Metadata:
    """The checkpoint's metadata (generated into ``path`` first if needed), cached like upstream."""
    need = io["safetensors"] and not any(f.endswith(".metadata") for f in os.listdir(path))
    if dist.get_world_size() > 1:
        dist.barrier(io["process_group"])  # every rank has looked before rank 0 writes
    if need:
        _write_hf_metadata(path, io["process_group"])
    if lsd._metadata_manager.is_metadata_list_empty():
        names = sorted(f for f in os.listdir(path) if f.endswith(".metadata"))
        assert len(names) == 1, "Only support one metadata file now."
        lsd._metadata_manager.set_metadata_list([paddle.load(os.path.join(path, names[0]))])
    metadata: Metadata = lsd._metadata_manager.get_metadata_list()[0]
    return metadata


def _write_hf_metadata(path: str, process_group: Any) -> None:
    """Upstream's ``create_hf_ckpt_metadata``: describe every safetensors file, write into ``path``."""
    state: dict[str, list[LocalTensorMetadata]] = {}
    storage: dict[LocalTensorIndex, str] = {}
    for name in sorted(f for f in os.listdir(path) if f.endswith(".safetensors")):
        with safe_open(os.path.join(path, name), framework="np") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                view = f.get_slice(key)
                shape = tuple(view.get_shape())
                zero = (0,) * len(shape)
                dtype = storage_dtype(view.get_dtype())
                state[key] = [LocalTensorMetadata(zero, shape, dtype, shape)]
                storage[LocalTensorIndex(key, zero, local_shape=shape)] = name
    if dist.get_rank() == 0:
        paddle.save(
            Metadata(state_dict_metadata=state, storage_metadata=storage),
            os.path.join(path, METADATA_NAME),
        )
    if dist.get_world_size() > 1:
        dist.barrier(process_group)


@contextlib.contextmanager
def _uint8_transport() -> Iterator[None]:
    """Upstream's aliasing of one-byte float dtypes to uint8 around its safetensors reads."""
    saved = [(module, name, getattr(module, name, None)) for module, name, _ in _ALIASES]
    try:
        for module, name, alias in _ALIASES:
            setattr(module, name, alias)
        yield
    finally:
        for module, name, value in saved:
            if value is None:
                delattr(module, name)
            else:
                setattr(module, name, value)
