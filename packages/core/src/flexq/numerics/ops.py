"""One set of array operations over numpy arrays and Paddle tensors, for format plugins.

A format writes its dequantization once against :class:`ArrayOps`; the same
code then runs with numpy on the CPU (where numpy's table lookups are several
times faster than Paddle 3.3.1's CPU kernels) and with Paddle ops on the device
the components already live on (where only quantized bytes cross the bus).
Every operation here is exact (lookups, repeats, reshapes, integer bit
operations, float32 products), so both give bit-identical results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from flexq.numerics.arrays import is_paddle
from flexq.numerics.bands import banded_lookup, pair_items, pairable
from flexq.numerics.rounding import bfloat16_bits_to_float32
from flexq.numerics.words import code_positions, unpack_into


class ArrayOps(Protocol):
    """The operations a dequantizer needs, on one kind of array."""

    def float32(self, x: Any, dtype: str) -> Any:
        """Source ``x`` of safetensors dtype ``dtype`` (F32, F16, BF16, integers) as float32."""

    def lut(self, table: np.ndarray, codes: Any) -> Any:
        """``table[codes]`` for an integer code array; same shape as ``codes``."""

    def lut_mul(self, table: np.ndarray, codes: Any, scale: Any, out: Any = None) -> Any:
        """``table[codes] * scale`` in float32; ``scale`` has the rank of ``codes`` and
        each of its dims is 1 or equal. Products beyond float32's range are inf.
        ``out`` (numpy only, C-contiguous, ``codes``' shape) receives the result."""

    def lut_pairs(self, table: np.ndarray, codes: Any) -> Any:
        """``table`` [256, 2] float32 looked up by byte ``codes`` [..., n] -> [..., 2n]
        (one lookup decodes both nibbles of a byte)."""

    def mul_into(self, a: Any, b: Any) -> Any:
        """``a * b`` (broadcast); may overwrite ``a`` (numpy multiplies in place)."""

    def repeat(self, x: Any, n: int, axis: int) -> Any:
        """Repeat each element ``n`` times along ``axis`` (float32/int32/int64 arrays)."""

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        """``x`` with a new shape."""

    def transpose(self, x: Any) -> Any:
        """A 2-D array with its axes swapped (contiguous)."""

    def shift_and(self, x: Any, shift: int, mask: int) -> Any:
        """``(x >> shift) & mask`` as a logical (unsigned) shift, result int64-safe."""

    def unpack(self, packed: Any, bits: int, slots: Sequence[int], transposed: bool) -> Any:
        """Unpack integer words [R, C] of ``bits``-bit codes into float32 codes.

        A word holds ``k = 32 // bits`` codes (``8 // bits`` for uint8 words);
        element j of each group of k comes from slot ``slots[j]`` (bits
        ``bits*slot ..``), read as unsigned. Result [R, k*C], or [k*C, R] when
        ``transposed`` (the codes of word (r, c) land in rows k*c..k*c+k-1 of
        column r).
        """

    def unpack_codes(
        self, words: Any, bits: int, count: int, first_bit: int = 0, per_word: int | None = None
    ) -> Any:
        """Float32 codes ``[R, count]`` of int32 words ``[R, W]`` packed LSB-first along
        the last axis (GPTQ, compressed-tensors), laid out as
        :func:`~flexq.numerics.words.unpack_into` reads them: the kit's one unpacker on
        numpy; on Paddle the same codes gathered by bit position on the words' device
        (int64 words holding the unsigned 32-bit values are taken as they are)."""


def _unsigned(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"uint{x.dtype.itemsize * 8}"))


class NumpyOps:
    """:class:`ArrayOps` on numpy arrays (the CPU path)."""

    def float32(self, x: Any, dtype: str) -> Any:
        if dtype == "BF16":
            return bfloat16_bits_to_float32(x)
        return np.asarray(x, dtype=np.float32)

    def lut(self, table: np.ndarray, codes: Any) -> Any:
        if pairable(table, codes):
            return banded_lookup(table, codes, None, None)
        # Fancy indexing with small unsigned codes is ~2x faster than np.take.
        return table[codes]

    def lut_mul(self, table: np.ndarray, codes: Any, scale: Any, out: Any = None) -> Any:
        scale = np.asarray(scale, dtype=np.float32)
        if pairable(table, codes) and scale.ndim <= codes.ndim:
            return banded_lookup(table, codes, scale, out)
        values = self.lut(table, codes)
        with np.errstate(over="ignore", invalid="ignore"):
            if out is None:
                values *= scale
                return values
            np.multiply(values, scale, out=out)
        return out

    def lut_pairs(self, table: np.ndarray, codes: Any) -> Any:
        # A pair of float32 is one 8-byte item: a single fancy-index gather with
        # uint8 indexes is ~2x faster than np.take on a [256, 2] table.
        return pair_items(table)[codes].view(np.float32)

    def mul_into(self, a: Any, b: Any) -> Any:
        # Products above float32's range are infinity by definition: no warning
        # (a NaN scale is reported once, by the format's ScaleWarning).
        with np.errstate(over="ignore", invalid="ignore"):
            return np.multiply(a, b, out=a)

    def repeat(self, x: Any, n: int, axis: int) -> Any:
        return np.repeat(x, n, axis=axis)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return np.reshape(x, shape)

    def transpose(self, x: Any) -> Any:
        return np.ascontiguousarray(np.asarray(x).T)

    def shift_and(self, x: Any, shift: int, mask: int) -> Any:
        unsigned = _unsigned(x)
        return (unsigned >> np.uint8(shift)) & np.asarray(mask, dtype=unsigned.dtype)

    def unpack(self, packed: Any, bits: int, slots: Sequence[int], transposed: bool) -> Any:
        words = _unsigned(np.asarray(packed))
        rows, cols = words.shape
        k = len(slots)
        mask = words.dtype.type((1 << bits) - 1)
        if transposed:
            # Transposing the words first (1/k of the output) keeps every pass
            # below contiguous; unpacking from the strided view is 4x slower.
            src = np.ascontiguousarray(words.T)
            out = np.empty((cols, k, rows), dtype=np.float32)
        else:
            src = words
            out = np.empty((rows, cols, k), dtype=np.float32)
        piece = np.empty_like(src)
        for j, slot in enumerate(slots):
            np.right_shift(src, words.dtype.type(bits * slot), out=piece)
            np.bitwise_and(piece, mask, out=piece)
            if transposed:
                out[:, j, :] = piece
            else:
                out[:, :, j] = piece
        return out.reshape((cols * k, rows) if transposed else (rows, cols * k))

    def unpack_codes(
        self, words: Any, bits: int, count: int, first_bit: int = 0, per_word: int | None = None
    ) -> Any:
        w = np.ascontiguousarray(np.asarray(words))
        out = np.empty((w.shape[0], count), np.float32)
        unpack_into(w, bits, out, first_bit=first_bit, per_word=per_word)
        return out


class PaddleOps:
    """:class:`ArrayOps` on Paddle tensors, run on the tensors' own device."""

    def __init__(self) -> None:
        import paddle

        self._paddle = paddle

    def float32(self, x: Any, dtype: str) -> Any:
        return x.astype("float32")

    def lut(self, table: np.ndarray, codes: Any) -> Any:
        p = self._paddle
        t = p.to_tensor(table, place=codes.place)
        flat = p.gather(t, codes.astype("int64").reshape([-1]))
        return flat.reshape(list(codes.shape))

    def lut_mul(self, table: np.ndarray, codes: Any, scale: Any, out: Any = None) -> Any:
        return self.lut(table, codes) * scale  # device results stay on the device

    def lut_pairs(self, table: np.ndarray, codes: Any) -> Any:
        p = self._paddle
        t = p.to_tensor(np.ascontiguousarray(table, dtype=np.float32), place=codes.place)
        rows = p.gather(t, codes.astype("int64").reshape([-1]), axis=0)
        return rows.reshape([*codes.shape[:-1], 2 * codes.shape[-1]])

    def mul_into(self, a: Any, b: Any) -> Any:
        return a * b

    def repeat(self, x: Any, n: int, axis: int) -> Any:
        return self._paddle.repeat_interleave(x, n, axis=axis)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return x.reshape(list(shape))

    def transpose(self, x: Any) -> Any:
        return self._paddle.transpose(x, [1, 0])

    def _wide(self, x: Any) -> Any:
        # int64 holds every uint8/int32 pattern as a non-negative number once the
        # sign is masked off, so a right shift is logical and no sign bit leaks.
        p = self._paddle
        width = {p.uint8: 0xFF, p.int8: 0xFF, p.int16: 0xFFFF, p.int32: 0xFFFFFFFF}[x.dtype]
        return p.bitwise_and(x.astype("int64"), p.to_tensor(width, dtype="int64", place=x.place))

    def shift_and(self, x: Any, shift: int, mask: int) -> Any:
        p = self._paddle
        by = p.to_tensor(shift, dtype="int64", place=x.place)
        shifted = p.bitwise_right_shift(self._wide(x), by, is_arithmetic=False)
        return p.bitwise_and(shifted, p.to_tensor(mask, dtype="int64", place=x.place))

    def unpack(self, packed: Any, bits: int, slots: Sequence[int], transposed: bool) -> Any:
        p = self._paddle
        place = packed.place
        words = self._wide(packed)
        rows, cols = words.shape
        k = len(slots)
        shifts = p.to_tensor([bits * s for s in slots], dtype="int64", place=place)
        if transposed:
            codes = p.bitwise_right_shift(
                words.T.unsqueeze(1), shifts.reshape([k, 1]), is_arithmetic=False
            )
            shape = [cols * k, rows]
        else:
            codes = p.bitwise_right_shift(words.unsqueeze(-1), shifts, is_arithmetic=False)
            shape = [rows, cols * k]
        codes = p.bitwise_and(codes, p.to_tensor((1 << bits) - 1, dtype="int64", place=place))
        return codes.astype("float32").reshape(shape)

    def unpack_codes(
        self, words: Any, bits: int, count: int, first_bit: int = 0, per_word: int | None = None
    ) -> Any:
        p = self._paddle
        place = words.place
        wide = words if words.dtype == p.int64 else self._wide(words)
        wide = p.concat([wide, p.zeros([wide.shape[0], 1], dtype="int64").to(place)], axis=1)
        bit = code_positions(count, bits, first_bit=first_bit, per_word=per_word)
        word = p.to_tensor(bit // 32, dtype="int64", place=place)
        lo = p.index_select(wide, word, axis=1)
        hi = p.index_select(wide, word + 1, axis=1)
        # hi << 32 may wrap into the sign bit; only the bits below 40 are kept.
        both = p.bitwise_or(
            lo, p.bitwise_left_shift(hi, p.to_tensor(32, dtype="int64", place=place))
        )
        shift = p.to_tensor(bit % 32, dtype="int64", place=place)
        codes = p.bitwise_right_shift(both, shift, is_arithmetic=False)
        codes = p.bitwise_and(codes, p.to_tensor((1 << bits) - 1, dtype="int64", place=place))
        return codes.astype("float32")


_NUMPY = NumpyOps()


def ops_for(x: object) -> ArrayOps:
    """The operations for ``x``'s kind of array (Paddle tensor or numpy array)."""
    return PaddleOps() if is_paddle(x) else _NUMPY
