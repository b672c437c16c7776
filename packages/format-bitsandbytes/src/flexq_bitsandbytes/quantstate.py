"""The JSON blob bitsandbytes stores in ``X.weight.quant_state.bitsandbytes__<type>``.

``QuantState.as_dict(packed=True)`` (bitsandbytes 0.50.2) puts every non-tensor
field of a 4-bit quant state into one U8 tensor holding ``json.dumps`` of a
dict, UTF-8 encoded: ``quant_type`` ("nf4"/"fp4"), ``blocksize``, ``dtype``
(the dtype the weight was quantized from, e.g. "bfloat16"), ``shape`` (the
original shape), and with double quantization ``nested_blocksize`` (256),
``nested_dtype`` ("float32") and ``nested_offset`` (the mean of the absmax
values that was subtracted before coding them, as a JSON number).

The shape, dtype and block sizes live only there, so the detector reads the
blob (a few hundred bytes per parameter) through the Checkpoint while finding
the logical tensors: a deliberate read before any plan, bounded by the blob's
size, and counted in ``Checkpoint.bytes_read`` like every other read.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from flexq import Checkpoint, FormatError
from flexq.formatkit import parse_json_model
from flexq_bitsandbytes.config import FORMAT

#: Largest blob accepted (real ones are under 300 bytes).
MAX_BLOB_BYTES = 1 << 16
#: Natural dtypes bnb dequantizes 4-bit weights to.
DTYPES = ("bfloat16", "float16", "float32")


class QuantState(BaseModel):
    """The decoded blob of one 4-bit parameter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quant_type: Literal["nf4", "fp4"]
    blocksize: int = Field(gt=0)
    dtype: Literal["bfloat16", "float16", "float32"]
    shape: tuple[int, ...] = Field(min_length=1)
    nested_blocksize: int | None = Field(default=None, gt=0)
    nested_dtype: Literal["float32"] | None = None
    nested_offset: float | None = None

    @property
    def nested(self) -> bool:
        return self.nested_blocksize is not None or self.nested_offset is not None


def read_quant_state(ckpt: Checkpoint, key: str) -> QuantState:
    """Read and check the blob ``key`` (the bounded detection-time read described above).

    :raises FormatError: naming file, tensor and format when the tensor is not a
        U8 vector of JSON, lacks a field, or mixes nested and plain fields.
    """
    info = ckpt.info(key)
    where = f"{info.file}: tensor {key!r} (format {FORMAT!r}, 4-bit quant state)"
    if info.dtype != "U8" or len(info.shape) != 1 or info.nbytes > MAX_BLOB_BYTES:
        raise FormatError(
            f"{where} is {info.dtype} {list(info.shape)}; expected a U8 vector of "
            f"at most {MAX_BLOB_BYTES} bytes holding JSON"
        )
    state = parse_json_model(QuantState, ckpt.read(key).tobytes(), where)
    suffix = key.rsplit("__", 1)[-1]
    if state.quant_type != suffix:
        raise FormatError(f"{where} says quant_type {state.quant_type!r}; its name says {suffix!r}")
    if any(d < 0 for d in state.shape):
        raise FormatError(f"{where} has a negative dimension in shape {list(state.shape)}")
    complete = (state.nested_blocksize, state.nested_dtype, state.nested_offset)
    if state.nested and None in complete:
        raise FormatError(
            f"{where} has only some of nested_blocksize, nested_dtype and nested_offset"
        )
    if state.nested_offset is not None and not math.isfinite(state.nested_offset):
        raise FormatError(f"{where} has a non-finite nested_offset {state.nested_offset}")
    return state
