"""A deliberately misbehaving format plugin for the reliability catalogue.

On disk: ``X.fq`` (I8, [rows, cols]) and ``X.fs`` (F32, [rows]) make the logical
``X.weight`` = fq * fs[:, None]. The environment variable ``FLEXQ_FAULTY_MODE``
picks one fault at call time, so the same module serves a runtime registration
(the Python API tests) and a real entry point (the CLI tests):

- ``raise:<hook>``: the hook ``flexq_<hook>`` raises RuntimeError;
- ``wrong-shape`` / ``wrong-dtype`` / ``none``: apply returns a [1, 1] array,
  the undecoded int8 codes, or None;
- ``ghost``: a logical tensor needs a source that is not in the checkpoint;
- ``no-sources``: source_keys returns None;
- ``bad-plan``: the read plan reads past the end of a source;
- ``claim-other``: also claims every F8_E4M3 weight (which the fp8 format owns);
- ``wrong-type:<hook>``: the hook returns a result of the wrong type
  (``quant_methods`` / ``recognized_keys`` / ``source_keys``: the int 42, which is
  not iterable; ``logical_metadata``: a LogicalTensor with shape ``"8x16"`` and
  dtype ``5``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

import flexq

__version__ = "1.0"
FORMAT_NAME = "faulty"
MODE_ENV = "FLEXQ_FAULTY_MODE"
Q, S = ".fq", ".fs"


def _mode() -> str:
    return os.environ.get(MODE_ENV, "")


def _fail(hook: str) -> None:
    if _mode() == f"raise:{hook}":
        raise RuntimeError(f"faulty {hook} exploded")


def _wrong(hook: str) -> bool:
    return _mode() == f"wrong-type:{hook}"


def _base(key: str) -> str:
    return key.removesuffix(".weight")


@flexq.hookimpl
def flexq_quant_methods() -> Any:
    return 42 if _wrong("quant_methods") else ["faulty"]


@flexq.hookimpl
def flexq_logical_metadata(checkpoint: flexq.Checkpoint) -> dict[str, flexq.LogicalTensor]:
    _fail("logical_metadata")
    if _wrong("logical_metadata"):
        malformed: Any = flexq.LogicalTensor("8x16", 5)  # type: ignore[arg-type]
        return {
            k.removesuffix(Q) + ".weight": malformed for k in checkpoint.tensors if k.endswith(Q)
        }
    out = {
        key.removesuffix(Q) + ".weight": flexq.LogicalTensor(info.shape, "float32")
        for key, info in checkpoint.tensors.items()
        if key.endswith(Q)
    }
    if _mode() == "claim-other":
        for key, info in checkpoint.tensors.items():
            if info.dtype == "F8_E4M3":
                out[key] = flexq.LogicalTensor(info.shape, "float32")
    return out


@flexq.hookimpl
def flexq_recognized_keys(checkpoint: flexq.Checkpoint) -> Any:
    _fail("recognized_keys")
    if _wrong("recognized_keys"):
        return 42
    return [k for k in checkpoint.tensors if k.endswith(S)]


@flexq.hookimpl
def flexq_source_keys(checkpoint: flexq.Checkpoint, logical_key: str) -> Any:
    _fail("source_keys")
    if _wrong("source_keys"):
        return 42
    if _mode() == "no-sources":
        return None
    if logical_key in checkpoint.tensors:  # claim-other: an F8 weight
        return [logical_key]
    sources = [_base(logical_key) + Q, _base(logical_key) + S]
    if _mode() == "ghost":
        sources.append(_base(logical_key) + ".fz")
    return sources


@flexq.hookimpl
def flexq_read_plan(logical_key: str, target: flexq.TargetSlice) -> flexq.ReadPlan:
    _fail("read_plan")
    (row, col), (rows, cols) = target.box
    if _mode() == "bad-plan":
        rows += 1
    slices = {
        _base(logical_key) + Q: ((row, col), (rows, cols)),
        _base(logical_key) + S: ((row,), (rows,)),
    }
    return flexq.ReadPlan("local", slices, target)


@flexq.hookimpl
def flexq_apply(logical_key: str, sources: Mapping[str, Any]) -> Any:
    _fail("apply")
    q, s = np.asarray(sources[_base(logical_key) + Q]), np.asarray(sources[_base(logical_key) + S])
    mode = _mode()
    if mode == "wrong-shape":
        return np.zeros((1, 1), np.float32)
    if mode == "wrong-dtype":
        return q
    if mode == "none":
        return None
    return q.astype(np.float32) * s[:, None]
