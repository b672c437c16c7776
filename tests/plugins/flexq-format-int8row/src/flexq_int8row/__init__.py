"""int8 weights with one float32 scale per row (the plugin-author guide's example).

On disk: ``X.weight_q`` (I8, [out, in]) and ``X.weight_qscale`` (F32, [out]);
config.json may say ``"quantization_config": {"quant_method": "int8row"}`` and
list unquantized modules in ``modules_to_not_convert``.
Logical tensor: ``X.weight`` [out, in] = weight_q * weight_qscale[:, None].

A format this small keeps the template's roles in one module, in the
template's order (layout, detect, plan, decode, encode, then the plugin
object); a larger one gives each role its own module of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import flexq
from flexq.formatkit import (
    Analysis,
    BoxSources,
    Format,
    IgnoreList,
    cached_per_checkpoint,
    natural_dtype,
    ops_for,
)

__version__ = "0.4.0"
METHOD, Q, S = "int8row", ".weight_q", ".weight_qscale"


# layout: one logical tensor, its shape, natural dtype and physical sources
@dataclass(frozen=True)
class RowScaled:
    base: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def sources(self) -> tuple[str, str]:
        return self.base + Q, self.base + S


# detect: which tensors are ours, from headers and config alone, once per checkpoint
@cached_per_checkpoint
def analyze(checkpoint: flexq.Checkpoint) -> Analysis[RowScaled]:
    where = f"{checkpoint.path / 'config.json'}: quantization_config"
    ignored = IgnoreList.from_config(checkpoint.quantization_config, where)
    dtype = natural_dtype(checkpoint, default="float32")
    tensors = {}
    for key, info in checkpoint.tensors.items():
        if not key.endswith(Q) or info.dtype != "I8":
            continue
        base, scale = key.removesuffix(Q), checkpoint.tensors.get(key.removesuffix(Q) + S)
        if scale is None or scale.shape != info.shape[:1]:
            raise flexq.FormatError(
                f"{info.file}: int8row weight {key!r} needs a [{info.shape[0]}] scale {base + S!r}"
            )
        ignored.refuse(base, file=info.file, tensor=key, stored="int8", format_name=METHOD)
        tensors[base + ".weight"] = RowScaled(base, info.shape, dtype)
    return Analysis(tensors, frozenset(k for k in checkpoint.tensors if k.endswith(S)))


# plan: a box of rows and columns reads the same box of weight_q and its rows of the scale
def local_plan(tensor: RowScaled, target: flexq.TargetSlice) -> flexq.ReadPlan:
    (row, _), (rows, _) = target.box
    q, s = tensor.sources
    # Declared scales are checked for NaN / infinity by the core before anything is written.
    return flexq.ReadPlan("local", {q: target.box, s: ((row,), (rows,))}, target, scales=(s,))


# decode: the math once, for numpy arrays and Paddle tensors alike, in float32
def decode(tensor: RowScaled, sources: BoxSources, out: Any) -> Any:
    q, s = (sources[k] for k in tensor.sources)
    ops = ops_for(q)
    return ops.float32(q, "I8") * ops.reshape(ops.float32(s, "F32"), (-1, 1))


# encode: a checkpoint of this format from float32 [out, in] weights
def quantize(w: np.ndarray, base: str) -> dict[str, flexq.RawTensor]:
    scale = np.maximum(np.abs(w).max(axis=1), 1e-12).astype(np.float32) / 127
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return {base + Q: flexq.RawTensor.of(q), base + S: flexq.RawTensor.of(scale)}


def encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, flexq.RawTensor]
) -> float:
    tensors = dict(others)
    for key, w in weights.items():
        tensors.update(quantize(w, key.removesuffix(".weight")))
    config = {"quantization_config": {"quant_method": METHOD}}
    flexq.save_checkpoint(directory, tensors, config=config)
    return 0.999  # int8 with one scale per row: the documented tolerance


# the plugin: one Format object, the hooks written once over the parts above
plugin = Format(
    "int8row",
    "int8 weights with one float32 scale per row (the plugin-author guide's example).",
    methods=(METHOD,),
    analyze=analyze,
    plan=local_plan,
    decode=decode,
    encode=encode,
    api_version="1.2",  # the flexq.formatkit.API_VERSION this module was written for
)
