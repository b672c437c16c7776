"""Conversions between the reader's numpy arrays and Paddle tensors, and the one rounding step.

Used by the load pipeline: sources go to Paddle in their storage dtype
(one-byte formats as uint8, BF16 as bfloat16), and a format's float32 result is
rounded once to the caller's output dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from flexq.dtypes import (
    BF16_NEGATIVE_NAN,
    BF16_QUIET_NAN,
    float32_to_bfloat16_bits,
    storage_dtype,
)
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


def round_numpy(x: np.ndarray, output_dtype: str, out: np.ndarray | None = None) -> np.ndarray:
    """Round a numpy array once to ``output_dtype`` (bfloat16 as uint16 bits).

    ``out``: None, or a C-contiguous array of ``x``'s shape in that storage
    dtype (a target's own memory) to write the result into; it is returned.
    """
    if output_dtype == "bfloat16":
        if x.dtype == np.uint16:
            return x if out is None else _copied(x, out)
        return float32_to_bfloat16_bits(x, out)
    try:
        target = _NUMPY_OUTPUT[output_dtype]
    except KeyError:
        raise ValueError(f"unsupported output dtype {output_dtype!r}") from None
    # Beyond float16's range the rounded value is inf by definition, not an error.
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=target) if out is None else _copied(x, out)


def _copied(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.copyto(out, x, casting="unsafe")
    return out


def round_paddle(x: Any, output_dtype: str) -> Any:
    """Round a Paddle tensor once to ``output_dtype``, where it lives.

    Host tensors round through numpy: Paddle 3.3.1's CPU float16 cast
    mis-rounds values far below float16's range (1.75e-26 becomes a subnormal).
    Device tensors round with :func:`_round_on_device`.
    """
    import paddle

    if paddle_dtype_name(x.dtype) == output_dtype:
        return x
    if not on_cpu(x):
        return _round_on_device(x, output_dtype)
    # Widening bfloat16 is exact; to_numpy would hand over its raw bits instead.
    wide = x.astype("float32") if x.dtype == paddle.bfloat16 else x
    return to_paddle(round_numpy(to_numpy(wide), output_dtype), output_dtype)


def _round_on_device(x: Any, output_dtype: str) -> Any:
    """Paddle's own cast (nearest, ties to even), with NaN made the canonical signed
    quiet NaN the numpy path writes (Paddle 3.3.1 writes 0x7FFF and drops the sign)."""
    import paddle

    out = x.astype(output_dtype)
    if output_dtype != "bfloat16" or x.dtype != paddle.float32:
        return out
    nan = paddle.isnan(x)
    if not bool(nan.any()):
        return out
    # Select in int32 (CPU Paddle has no bfloat16 `where`), then reinterpret.
    negative = x.view(paddle.int32) < 0
    bits = out.view(paddle.int16).astype("int32")
    canon = paddle.where(
        negative,
        paddle.full_like(bits, _signed16(BF16_NEGATIVE_NAN)),
        paddle.full_like(bits, BF16_QUIET_NAN),
    )
    return paddle.where(nan, canon, bits).astype("int16").view(paddle.bfloat16)


def _signed16(bits: int) -> int:
    return bits - 0x10000 if bits >= 0x8000 else bits


def to_paddle(x: Any, output_dtype: str) -> Any:
    """``x`` (numpy or Paddle) as a Paddle tensor of ``output_dtype``, rounded once."""
    import paddle

    if is_paddle(x):
        return round_paddle(x, output_dtype)
    t = paddle.to_tensor(round_numpy(np.require(x, requirements="C"), output_dtype))
    return t.view(paddle.bfloat16) if output_dtype == "bfloat16" else t


def source_to_paddle(x: np.ndarray, st_dtype: str) -> Any:
    """A reader array as a Paddle tensor in its transport dtype (BF16 -> bfloat16, F8 -> uint8)."""
    import paddle

    t = paddle.to_tensor(np.require(x, requirements="C"))
    return t.view(paddle.bfloat16) if st_dtype == "BF16" else t


def on_cpu(x: Any) -> bool:
    """True for numpy arrays and Paddle tensors in host memory."""
    return not is_paddle(x) or bool(x.place.is_cpu_place())


def host_to_numpy(sources: Mapping[str, Any]) -> dict[str, Any]:
    """Sources in host memory as numpy (the fastest CPU path); device tensors stay put."""
    return {k: to_numpy(v) if on_cpu(v) else v for k, v in sources.items()}


def to_numpy(x: Any) -> np.ndarray:
    """A Paddle tensor (or array) as numpy; bfloat16 comes back as uint16 bits.

    Host tensors are shared, not copied (see :func:`host_view`), so treat the
    result as read-only; device tensors are copied to the host.
    """
    if not is_paddle(x):
        return np.asarray(x)
    view = host_view(x) if x.size > 0 else None
    return view if view is not None else np.asarray(x.numpy())


def host_view(x: Any, *, writable: bool = False) -> np.ndarray | None:
    """A numpy array sharing a host Paddle tensor's memory (bfloat16 as uint16 bits),
    or None for a device tensor or a dtype DLPack does not carry.

    Trainable parameters (``stop_gradient=False``) are shared too: DLPack refuses
    tensors that require gradients, so the view is taken of ``x.detach()``, which
    shares ``x``'s memory. ``writable``: the caller writes through the view (a load
    target). numpy before 2.2 marks every DLPack import read-only; then the view
    is rebuilt over the same memory, writable, and keeps the tensor alive.
    """
    import paddle

    if not x.place.is_cpu_place():
        return None
    x = x.detach()
    view: np.ndarray
    try:
        if x.dtype == paddle.bfloat16:
            view = np.from_dlpack(x.view(paddle.int16)).view(np.uint16)
        else:
            view = np.from_dlpack(x)
    except (BufferError, TypeError, RuntimeError):
        return None
    if writable and not view.flags.writeable:
        return np.asarray(_SharedMemory(x, view))
    return view


class _SharedMemory:
    """A host tensor's memory as a writable numpy array interface.

    ``view`` is a read-only DLPack view of ``tensor`` (numpy < 2.2); the array
    built from this object has the same layout, may be written, and holds
    ``tensor`` (through this object, its base) for as long as it lives.
    """

    def __init__(self, tensor: Any, view: np.ndarray) -> None:
        self.tensor = tensor
        face = dict(view.__array_interface__)
        face["data"] = (face["data"][0], False)
        self.__array_interface__ = face


def passthrough_dtype(st_dtype: str) -> str | None:
    """Paddle dtype name of an unquantized safetensors dtype, None if Paddle has none."""
    return storage_dtype(st_dtype).paddle
