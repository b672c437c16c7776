"""The one rounding step: float32 results rounded once to the caller's output dtype.

For the core (every dequantized box and cast passthrough tensor goes through
here) and for formats that round themselves. numpy holds bfloat16 as raw
uint16 bits; Paddle tensors are rounded where they live.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flexq.formatkit.arrays import is_paddle, on_cpu, to_numpy
from flexq.formatkit.threads import run_parts
from flexq.io.dtypes import paddle_dtype, paddle_dtype_name

#: Canonical bfloat16 NaN bit patterns flexq writes (positive and negative).
BF16_QUIET_NAN = 0x7FC0
BF16_NEGATIVE_NAN = 0xFFC0
#: Elements per rounding chunk: 1 MiB of float32 and its uint32 temporary stay
#: near a core's L2 cache; smaller chunks lose more to per-call overhead and
#: threads trading the GIL than they gain in cache hits (64 Ki elements ran at
#: half the speed on a 2-core EPYC).
_ROUND_CHUNK = 1 << 18


def bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen raw bfloat16 bit patterns (uint16) to float32 exactly."""
    # A uint32 shift: numpy 1.26 would widen a 0-d array shifted by a Python int to int64.
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def float32_to_bfloat16_bits(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Round float32 to bfloat16 (nearest, ties to even) and return the uint16 bits.

    NaN becomes the canonical quiet NaN with its sign kept (0x7FC0 / 0xFFC0, the
    same bits :func:`round_paddle` gives on a device); infinities and signed
    zeros are kept. It runs over every weight, so in cache-sized chunks on the
    worker threads. ``out`` (C-contiguous uint16 of ``values``' shape, e.g. a
    target's memory) receives the bits instead of a new array.
    """
    x = np.ascontiguousarray(values, dtype=np.float32)
    if out is None:
        out = np.empty(x.shape, dtype=np.uint16)
    flat, bits = x.reshape(-1), out.reshape(-1)

    def work(starts: Sequence[int]) -> None:
        for start in starts:
            _round_chunk(flat[start : start + _ROUND_CHUNK], bits[start : start + _ROUND_CHUNK])

    run_parts(work, range(0, flat.size, _ROUND_CHUNK), 8)
    return out


def _round_chunk(values: np.ndarray, out: np.ndarray) -> None:
    """Round one 1-D chunk of float32 ``values`` into ``out`` (uint16 bits)."""
    u = values.view(np.uint32)
    rounded = u >> 16
    rounded &= 1
    rounded += u
    rounded += 0x7FFF
    np.right_shift(rounded, 16, out=out, casting="unsafe")
    # max is NaN exactly when some value is: one read instead of a mask and a scan.
    if np.isnan(np.max(values)):
        nan = np.isnan(values)
        # Rounding a NaN's payload could carry into the sign or give an infinity.
        out[nan] = np.where(np.signbit(values[nan]), BF16_NEGATIVE_NAN, BF16_QUIET_NAN)


def round_numpy(x: np.ndarray, output_dtype: str, out: np.ndarray | None = None) -> np.ndarray:
    """Round a numpy array once to ``output_dtype`` (bfloat16 as uint16 bits).

    ``out``: None, or a C-contiguous array of ``x``'s shape in that storage
    dtype (a target's own memory) to write the result into; it is returned.
    """
    if output_dtype == "bfloat16":
        if x.dtype == np.uint16:
            return x if out is None else _copied(x, out)
        return float32_to_bfloat16_bits(x, out)
    target = paddle_dtype(output_dtype).numpy
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
        paddle.full_like(bits, BF16_NEGATIVE_NAN - 0x10000),
        paddle.full_like(bits, BF16_QUIET_NAN),
    )
    return paddle.where(nan, canon, bits).astype("int16").view(paddle.bfloat16)


def to_paddle(x: Any, output_dtype: str) -> Any:
    """``x`` (numpy or Paddle) as a Paddle tensor of ``output_dtype``, rounded once."""
    import paddle

    if is_paddle(x):
        return round_paddle(x, output_dtype)
    t = paddle.to_tensor(round_numpy(np.require(x, requirements="C"), output_dtype))
    return t.view(paddle.bfloat16) if output_dtype == "bfloat16" else t
