"""The one rounding step: float32 results rounded once to the caller's output dtype.

For the core (every dequantized box and cast passthrough tensor goes through
here) and for formats that round themselves. numpy holds bfloat16 as raw
uint16 bits; Paddle tensors are rounded where they live.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from flexq.errors import FlexqError
from flexq.io.dtypes import paddle_dtype, paddle_dtype_name
from flexq.numerics.arrays import is_paddle, on_cpu, to_numpy
from flexq.numerics.threads import run_on_threads

#: Canonical bfloat16 NaN bit patterns flexq writes (positive and negative).
BF16_QUIET_NAN = 0x7FC0
BF16_NEGATIVE_NAN = 0xFFC0
#: Elements per rounding chunk: 1 MiB of float32 and its uint32 temporary stay
#: near a core's L2 cache; smaller chunks lose more to per-call overhead and
#: threads trading the GIL than they gain in cache hits (64 Ki elements ran at
#: half the speed on a 2-core EPYC).
_ROUND_CHUNK = 1 << 18

#: Output dtype -> the smallest magnitude that rounds to infinity in it (float16: its
#: largest value 65504 plus half an ulp). bfloat16 has float32's exponent range: only
#: values within 2^-9 of float32's largest overflow it, which no weight comes near.
OVERFLOW_AT = {"float16": 65520.0}
#: "error" (the default): finite values that become infinite in a narrow output dtype
#: fail the load; "saturate": they become the dtype's largest finite value, signed.
OVERFLOW_ENV = "FLEXQ_OVERFLOW"


class Overflow(ValueError):
    """Finite values that rounding to a narrow dtype would make infinite (raised by the
    rounding step; the core turns it into a :class:`flexq.TargetError` naming the tensor).

    :ivar count: how many values overflow.
    :ivar largest: the largest magnitude among them.
    """

    def __init__(self, dtype: str, count: int, largest: float) -> None:
        super().__init__(f"{count} values overflow {dtype} (largest magnitude {largest:g})")
        self.dtype, self.count, self.largest = dtype, count, largest


def saturating() -> bool:
    """Whether :data:`OVERFLOW_ENV` asks overflowing values to saturate instead of failing."""
    mode = os.environ.get(OVERFLOW_ENV, "error")
    if mode not in ("error", "saturate"):
        raise FlexqError(f"{OVERFLOW_ENV}={mode!r}: use 'error' (the default) or 'saturate'")
    return mode == "saturate"


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
            round_band(flat[start : start + _ROUND_CHUNK], bits[start : start + _ROUND_CHUNK])

    run_on_threads(work, range(0, flat.size, _ROUND_CHUNK), 8)
    return out


def round_band(values: np.ndarray, out: np.ndarray) -> None:
    """Round one 1-D band of float32 ``values`` into ``out`` (uint16 bits) on this thread:
    :func:`float32_to_bfloat16_bits`'s work on one chunk, for decoders that round each
    band while it is still in cache (:func:`flexq.numerics.bands.run_in_bands_rounded`)."""
    u = values.view(np.uint32)
    # One uint32 temporary, every later pass in place: bits = (u + 0x7FFF + lsb) >> 16
    # with lsb bit 16 of u, narrowed by a plain cast (a shift straight into uint16
    # goes through the ufunc's cast buffers, ~10% slower).
    rounded = u >> 16
    rounded &= 1
    rounded += u
    rounded += 0x7FFF
    rounded >>= 16
    np.copyto(out, rounded, casting="unsafe")
    # max is NaN exactly when some value is: one read instead of a mask and a scan.
    if values.size and np.isnan(np.max(values)):
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
    limit = OVERFLOW_AT.get(output_dtype)
    if limit is not None and np.dtype(x.dtype).itemsize > np.dtype(target).itemsize:
        return _narrowed(x, target, limit, out)
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=target) if out is None else _copied(x, out)


def _narrowed(x: np.ndarray, target: Any, limit: float, out: np.ndarray | None) -> np.ndarray:
    """Round ``x`` into a dtype whose range ends at ``limit`` (float16), chunk by chunk on
    the worker threads; a chunk's finite values beyond the range raise :class:`Overflow`
    before the chunk is written (or, :func:`saturating`, become the largest finite value).

    The check is a max and a min of each cache-sized chunk just before it is rounded:
    only a chunk that holds a NaN or an overflowing value is looked at closely.
    """
    src = np.ascontiguousarray(x)
    if out is None:
        out = np.empty(src.shape, dtype=target)
    flat, dst = src.reshape(-1), out.reshape(-1)
    saturate = saturating()
    largest = float(np.finfo(target).max)
    found: list[tuple[int, float]] = []

    def work(starts: Sequence[int]) -> None:
        for start in starts:
            if found and not saturate:
                return  # the load fails: round no more
            chunk = flat[start : start + _ROUND_CHUNK]
            into = dst[start : start + _ROUND_CHUNK]
            if chunk.size and not (chunk.max() < limit and chunk.min() > -limit):
                # A NaN, an infinity (a non-finite scale: warned about) or an overflow.
                over = np.isfinite(chunk) & (np.abs(chunk) >= limit)
                n = int(np.count_nonzero(over))
                if n and not saturate:
                    found.append((n, float(np.abs(chunk[over]).max())))
                    return
                with np.errstate(over="ignore"):
                    np.copyto(into, chunk, casting="unsafe")
                if n:
                    into[over] = np.copysign(largest, chunk[over])
                continue
            np.copyto(into, chunk, casting="unsafe")

    run_on_threads(work, range(0, flat.size, _ROUND_CHUNK), 8)
    if found:
        # The load fails: count every overflowing value, not only the first chunk's.
        over = np.isfinite(flat) & (np.abs(flat) >= limit)
        raise Overflow(
            np.dtype(target).name, int(np.count_nonzero(over)), float(np.abs(flat[over]).max())
        )
    return out


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
    if output_dtype in OVERFLOW_AT and x.dtype == paddle.float32:
        over = paddle.isinf(out) & paddle.isfinite(x)
        n = int(over.astype("int32").sum())
        if n and not saturating():
            raise Overflow(output_dtype, n, float(paddle.abs(x[over]).max()))
        if n:
            top = paddle.full_like(x, float(np.finfo(np.float16).max))
            out = paddle.where(over, paddle.sign(x) * top, x).astype(output_dtype)
        return out
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
