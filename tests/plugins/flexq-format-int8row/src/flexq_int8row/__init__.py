"""int8 weights with one float32 scale per row (the plugin-author guide's example).

On disk: ``X.weight_q`` (I8, [out, in]) and ``X.weight_qscale`` (F32, [out]).
Logical tensor: ``X.weight`` (float32, [out, in]) = weight_q * weight_qscale[:, None].
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

import flexq
from flexq.formatkit import ops_for

__version__ = "0.3.0"
Q, S = ".weight_q", ".weight_qscale"


def _base(key: str) -> str:
    return key.removesuffix(".weight")


@flexq.hookimpl
def flexq_logical_metadata(checkpoint: flexq.Checkpoint) -> dict[str, flexq.LogicalTensor]:
    out = {}
    for key, info in checkpoint.tensors.items():
        if key.endswith(Q) and info.dtype == "I8":
            base = key.removesuffix(Q)
            scale = checkpoint.tensors.get(base + S)
            if scale is None or scale.shape != info.shape[:1]:
                raise flexq.FormatError(
                    f"{info.file}: int8row weight {key!r} needs a [{info.shape[0]}] scale {base + S!r}"
                )
            out[base + ".weight"] = flexq.LogicalTensor(info.shape, "float32")
    return out


@flexq.hookimpl
def flexq_recognized_keys(checkpoint: flexq.Checkpoint) -> list[str]:
    return [k for k in checkpoint.tensors if k.endswith(S)]


@flexq.hookimpl
def flexq_source_keys(logical_key: str) -> list[str]:
    return [_base(logical_key) + Q, _base(logical_key) + S]


@flexq.hookimpl
def flexq_read_plan(logical_key: str, target: flexq.TargetSlice) -> flexq.ReadPlan:
    (row, col), (rows, cols) = target.box
    slices = {
        _base(logical_key) + Q: ((row, col), (rows, cols)),
        _base(logical_key) + S: ((row,), (rows,)),
    }
    return flexq.ReadPlan("local", slices, target)


@flexq.hookimpl
def flexq_apply(logical_key: str, sources: Mapping[str, Any]) -> Any:
    q, s = sources[_base(logical_key) + Q], sources[_base(logical_key) + S]
    ops = ops_for(q)
    return ops.float32(q, "I8") * ops.reshape(ops.float32(s, "F32"), (-1, 1))


@flexq.hookimpl
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, flexq.RawTensor]
) -> float:
    tensors = dict(others)
    for key, w in weights.items():
        base = key.removesuffix(".weight")
        scale = np.maximum(np.abs(w).max(axis=1), 1e-12).astype(np.float32) / 127
        q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
        tensors[base + Q] = flexq.RawTensor.of(q)
        tensors[base + S] = flexq.RawTensor.of(scale.astype(np.float32))
    flexq.save_checkpoint(directory, tensors, config={"quantization_config": {"int8row": True}})
    return 0.999  # int8 with one scale per row: the documented tolerance
