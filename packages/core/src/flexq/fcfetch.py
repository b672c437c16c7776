"""Fetch physical component boxes through Paddle 3.3.1's FlexCheckpoint loader and resharder.

For the ``"flexcheckpoint"`` engine of :func:`flexq.load_state_dict`: every
rank asks for the boxes its read plans name; Paddle balances the files over
the ranks, reads each file once and moves the boxes between ranks.

Two things 3.3.1 cannot do are worked around without touching the checkpoint
directory: its safetensors metadata generator writes into the checkpoint
directory and knows no I32/F8 dtypes, so flexq writes its own metadata into a
scratch directory of symlinks; and its safetensors reader has no
``float8_e8m0fnu``, so one-byte element formats travel as uint8 (the same
aliasing upstream Paddle uses, undone on exit).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from flexq.errors import FlexqError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from flexq.checkpoint import Checkpoint
    from flexq.plan import Box, ReadPlan

#: safetensors dtype -> the Paddle dtype it travels as.
TRANSPORT = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32",
    "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
    "F64": "float64", "F8_E4M3": "uint8", "F8_E5M2": "uint8", "F8_E8M0": "uint8",
}  # fmt: skip
_ONE_BYTE_ALIASES = ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")
METADATA_NAME = "flex-ckpt.auto_generated.metadata"


def transportable(ckpt: Checkpoint, keys: set[str]) -> bool:
    """Whether every tensor in ``keys`` can travel through FlexCheckpoint on 3.3.1."""
    return all(ckpt.info(k).dtype in TRANSPORT for k in keys)


@contextlib.contextmanager
def uint8_transport() -> Iterator[None]:
    """Let Paddle's safetensors reader hand one-byte element formats over as uint8."""
    import paddle

    saved = {name: getattr(paddle, name, None) for name in _ONE_BYTE_ALIASES}
    try:
        for name in _ONE_BYTE_ALIASES:
            setattr(paddle, name, paddle.uint8)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                delattr(paddle, name)
            else:
                setattr(paddle, name, value)


@contextlib.contextmanager
def scratch_checkpoint(ckpt: Checkpoint) -> Iterator[str]:
    """A temporary directory of symlinks to the data files plus flexq-built metadata."""
    import paddle
    from paddle.distributed.flex_checkpoint.dcp.metadata import (
        LocalTensorIndex,
        LocalTensorMetadata,
        Metadata,
    )

    scratch = tempfile.mkdtemp(prefix="flexq-fc-")
    try:
        for name in sorted({t.file for t in ckpt.tensors.values()}):
            os.symlink((ckpt.path / name).resolve(), os.path.join(scratch, name))
        state, storage = {}, {}
        for key, info in ckpt.tensors.items():
            if info.dtype not in TRANSPORT:
                continue
            zero = (0,) * len(info.shape)
            state[key] = [LocalTensorMetadata(zero, info.shape, TRANSPORT[info.dtype], info.shape)]
            storage[LocalTensorIndex(key, zero, local_shape=info.shape)] = info.file
        meta = Metadata(state_dict_metadata=state, storage_metadata=storage)
        paddle.save(meta, os.path.join(scratch, METADATA_NAME))
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _union(a: Box | None, b: Box) -> Box:
    if a is None:
        return b
    lo = tuple(min(x, y) for x, y in zip(a[0], b[0], strict=True))
    hi = tuple(max(x + s, y + t) for x, s, y, t in zip(a[0], a[1], b[0], b[1], strict=True))
    return lo, tuple(top - low for top, low in zip(hi, lo, strict=True))


def fetch(
    ckpt: Checkpoint,
    plans: list[ReadPlan],
    process_group: Any = None,
    offload: bool = False,
    **options: Any,
) -> list[dict[str, Any]]:
    """The source boxes of every plan, fetched collectively (every rank must call this).

    Returns one dict per plan, source key -> Paddle tensor of exactly the planned box.
    """
    import paddle
    from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

    boxes: dict[str, Box] = {}
    for plan in plans:
        for key, box in plan.source_slices.items():
            boxes[key] = _union(boxes.get(key), box)
    bad = sorted(k for k in boxes if ckpt.info(k).dtype not in TRANSPORT)
    if bad:
        raise FlexqError(
            f"{ckpt.path}: {bad[0]!r} is {ckpt.info(bad[0]).dtype}, which FlexCheckpoint "
            "cannot transport on this Paddle; use engine='direct'"
        )
    targets = {
        key: ShardedWeight(
            key,
            paddle.empty(list(shape), dtype=TRANSPORT[ckpt.info(key).dtype]),
            shape,
            ckpt.info(key).shape,
            offset,
        )
        for key, (offset, shape) in boxes.items()
    }
    with scratch_checkpoint(ckpt) as scratch, uint8_transport():
        lsd._metadata_manager.clear()
        try:
            lsd.load_state_dict_impl(
                targets,
                scratch,
                process_group=process_group,
                offload=offload,
                safetensors=True,
                **options,
            )
        finally:
            lsd._metadata_manager.clear()
            lsd.PATH_TO_CHECKPOINT_FILES.pop(scratch, None)
    return [
        {
            key: _crop(targets[key].local_tensor, boxes[key], box)
            for key, box in plan.source_slices.items()
        }
        for plan in plans
    ]


def _crop(tensor: Any, have: Box, want: Box) -> Any:
    """The ``want`` box out of a tensor holding the ``have`` box."""
    if have == want:
        return tensor
    import paddle

    starts = [w - h for w, h in zip(want[0], have[0], strict=True)]
    ends = [s + n for s, n in zip(starts, want[1], strict=True)]
    return paddle.slice(tensor, axes=list(range(len(starts))), starts=starts, ends=ends)
