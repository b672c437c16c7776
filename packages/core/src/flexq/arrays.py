"""Conversions between the reader's numpy arrays and Paddle tensors, and the one rounding step.

Used by the load pipeline: sources go to Paddle in their storage dtype
(one-byte formats as uint8, BF16 as bfloat16), and a format's float32 result is
rounded once to the caller's output dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexq.dtypes import float32_to_bfloat16_bits, storage_dtype
from flexq.ops import is_paddle

#: numpy dtype that holds each Paddle output dtype (bfloat16 as raw uint16 bits).
_NUMPY_OUTPUT = {
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": np.uint16,
    "float64": np.float64,
    "int32": np.int32,
    "int64": np.int64,
    "int8": np.int8,
    "int16": np.int16,
    "uint8": np.uint8,
    "bool": np.bool_,
}


def paddle_dtype_name(dtype: object) -> str:
    """``paddle.bfloat16`` / ``"bfloat16"`` / ``paddle.float32`` -> ``"bfloat16"`` ..."""
    name = str(dtype)
    return name.removeprefix("paddle.").removeprefix("VarType.").lower()


def itemsize(dtype: str) -> int:
    """Bytes per element of Paddle dtype name ``dtype``."""
    return int(np.dtype(_NUMPY_OUTPUT[dtype]).itemsize)


def round_numpy(x: np.ndarray, output_dtype: str) -> np.ndarray:
    """Round a numpy array once to ``output_dtype`` (bfloat16 as uint16 bits)."""
    if output_dtype == "bfloat16":
        if x.dtype == np.uint16:
            return x
        return float32_to_bfloat16_bits(x)
    try:
        return np.asarray(x, dtype=_NUMPY_OUTPUT[output_dtype])
    except KeyError:
        raise ValueError(f"unsupported output dtype {output_dtype!r}") from None


def to_paddle(x: Any, output_dtype: str) -> Any:
    """``x`` (numpy or Paddle) as a Paddle tensor of ``output_dtype``, rounded once."""
    import paddle

    if is_paddle(x):
        return x if paddle_dtype_name(x.dtype) == output_dtype else x.astype(output_dtype)
    t = paddle.to_tensor(round_numpy(np.require(x, requirements="C"), output_dtype))
    return t.view(paddle.bfloat16) if output_dtype == "bfloat16" else t


def source_to_paddle(x: np.ndarray, st_dtype: str) -> Any:
    """A reader array as a Paddle tensor in its transport dtype (BF16 -> bfloat16, F8 -> uint8)."""
    import paddle

    t = paddle.to_tensor(np.require(x, requirements="C"))
    return t.view(paddle.bfloat16) if st_dtype == "BF16" else t


def to_numpy(x: Any) -> np.ndarray:
    """A Paddle tensor (or array) as numpy; bfloat16 comes back as uint16 bits."""
    return np.asarray(x.numpy()) if is_paddle(x) else np.asarray(x)


def passthrough_dtype(st_dtype: str) -> str | None:
    """Paddle dtype name of an unquantized safetensors dtype, None if Paddle has none."""
    return storage_dtype(st_dtype).paddle
