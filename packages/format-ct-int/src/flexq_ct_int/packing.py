"""compressed-tensors' int32 packing of small integer codes, for the decoder and the encoder.

``pack_to_int32`` stores each code ``q`` as the unsigned ``q + 2^(bits-1)``
and packs a row LSB-first into little-endian int32 words. Weights are packed
along ``in`` (dim 1), zero points along ``out`` (dim 0: the same packing of the
transposed array). Where a code goes depends on the width and the release:

- 1, 2, 4 and 8 bits: ``32 / bits`` whole codes per word, code ``j`` at bit
  ``(j % k) * bits`` of word ``j // k`` -- every release agrees;
- 3, 5, 6 and 7 bits, compressed-tensors 0.17: ``32 // bits`` codes per word,
  the top bits of each word wasted (its PR 715, "padded");
- 3, 5, 6 and 7 bits, compressed-tensors 0.18 and later: one bit stream per
  row, code ``j`` at bit ``j * bits``, crossing word boundaries (PR 732, "dense").

So the two layouts of an odd width are told apart by the config's ``version``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flexq.formatkit import pack_words

#: Widths pack-quantized can hold.
SUPPORTED_BITS = (1, 2, 3, 4, 5, 6, 7, 8)
#: The first compressed-tensors release that packs odd widths densely.
DENSE_SINCE = (0, 18)


def offset_of(bits: int) -> int:
    """What compressed-tensors adds to a signed code before packing it (``2^(bits-1)``)."""
    return 1 << (bits - 1)


@dataclass(frozen=True)
class Packing:
    """Where each code of a packed row sits.

    :ivar bits: code width.
    :ivar dense: one bit stream across words (compressed-tensors >= 0.18 for odd
        widths); otherwise ``32 // bits`` codes per word. Both agree when bits divide 32.
    """

    bits: int
    dense: bool = True

    @property
    def per_word(self) -> int:
        """Whole codes per word when codes never cross a word (``32 // bits``)."""
        return 32 // self.bits

    @property
    def aligned(self) -> bool:
        """Whether codes never cross a word or a byte (1, 2, 4, 8 bits)."""
        return 8 % self.bits == 0

    def width(self, count: int) -> int:
        """Words a row of ``count`` codes takes."""
        if self.dense or self.aligned:
            return -(-count * self.bits // 32)
        return -(-count // self.per_word)

    def counts(self, width: int) -> range:
        """The row lengths that take exactly ``width`` words."""
        if width == 0:
            return range(0, 1)
        if self.dense or self.aligned:
            return range((width - 1) * 32 // self.bits + 1, width * 32 // self.bits + 1)
        k = self.per_word
        return range((width - 1) * k + 1, width * k + 1)

    def bit_of(self, index: np.ndarray) -> np.ndarray:
        """Bit position of each code ``index`` in its row's words (int64)."""
        j = np.asarray(index, dtype=np.int64)
        if self.dense or self.aligned:
            return j * self.bits
        k = self.per_word
        return (j // k) * 32 + (j % k) * self.bits

    def word_cover(self, start: int, count: int) -> tuple[int, int]:
        """(first word, number of words) holding codes ``start .. start+count``."""
        first = int(self.bit_of(np.array(start))) // 32
        if count == 0:
            return first, 0
        last = int(self.bit_of(np.array(start + count - 1))) + self.bits - 1
        return first, last // 32 - first + 1


def pack_rows(codes: np.ndarray, packing: Packing) -> np.ndarray:
    """Pack unsigned codes ``[R, C]`` (each < 2^bits) into int32 words along dim 1.

    :raises ValueError: on a code out of range.
    """
    bits = packing.bits
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ValueError(f"codes must be 2-D, got shape {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() >= 1 << bits):
        raise ValueError(f"codes must lie in 0..{(1 << bits) - 1}")
    dense = packing.dense or packing.aligned
    return pack_words(codes, bits, axis=1, per_word=None if dense else packing.per_word)


def pack_cols(codes: np.ndarray, packing: Packing) -> np.ndarray:
    """Pack unsigned codes ``[R, C]`` along dim 0 (zero points): words ``[width(R), C]``."""
    return np.ascontiguousarray(pack_rows(np.asarray(codes).T, packing).T)


def parse_version(value: object) -> tuple[int, ...] | None:
    """``"0.19.0"`` -> ``(0, 19, 0)``; None for a missing or unreadable version."""
    if not isinstance(value, str):
        return None
    parts: list[int] = []
    for piece in value.split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) < len(piece):
            break
    return tuple(parts) or None
