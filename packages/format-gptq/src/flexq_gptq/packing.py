"""Where each GPTQ code sits in its int32 words, and packing codes into words (numpy).

Used by the plan (which words cover a range of elements), the decoder (the
v1 zero offset) and the encoder. GPTQ packs codes of ``bits`` bits as one
little-endian bit stream along the packed axis: element ``k`` occupies bits
``bits*k .. bits*k + bits - 1`` of the stream, word ``w`` holding stream bits
``32w .. 32w + 31`` (bit 0 = least significant). For 2, 4 and 8 bits a word
holds ``32 / bits`` whole codes; for 3 bits a *unit* of three words holds 32
codes and codes 10 and 21 straddle a word boundary (AutoGPTQ's packer: word 0
holds codes 0-9 at bits 3j and the low two bits of code 10 at bits 30-31,
word 1 its high bit at bit 0, codes 11-20 at bits 3j+1 and the low bit of
code 21 at bit 31, word 2 its two high bits at bits 0-1 and codes 22-31 at
bits 3j+2).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import numpy as np

from flexq.formatkit import pack_words

#: Bit widths GPTQ packs (AutoGPTQ, GPTQModel, auto-round).
BITS = (2, 3, 4, 8)
WORD_BITS = 32


@dataclass(frozen=True)
class Packing:
    """The geometry of ``bits``-bit codes in int32 words.

    :ivar unit_codes: codes in one unit (the smallest run of whole words that
        holds whole codes): 16, 32, 8 or 4 for 2, 3, 4 or 8 bits.
    :ivar unit_words: int32 words in one unit: 3 for 3 bits, else 1.
    """

    bits: int

    @property
    def unit_codes(self) -> int:
        return WORD_BITS // gcd(WORD_BITS, self.bits)

    @property
    def unit_words(self) -> int:
        return self.bits // gcd(WORD_BITS, self.bits)

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    def words_for(self, codes: int) -> int | None:
        """Words that hold ``codes`` codes, or None when they do not fill whole units."""
        if codes % self.unit_codes:
            return None
        return codes // self.unit_codes * self.unit_words

    def codes_for(self, words: int) -> int | None:
        """Codes held by ``words`` words, or None when they are not whole units."""
        if words % self.unit_words:
            return None
        return words // self.unit_words * self.unit_codes

    def fields(self) -> list[tuple[int, int, int]]:
        """For each code of one unit: (word in the unit, bit shift, bits in that word).

        A code that straddles a word boundary continues at bit 0 of the next word.
        """
        out = []
        for k in range(self.unit_codes):
            bit = self.bits * k
            shift = bit % WORD_BITS
            out.append((bit // WORD_BITS, shift, min(self.bits, WORD_BITS - shift)))
        return out

    def v1_word_offsets(self) -> tuple[int, ...]:
        """What GPTQ v1 subtracted from each word of a unit: 1 at the first bit of every
        code that starts in that word (0x11111111 for 4 bits; for 3 bits per word of
        the unit 0x49249249, 0x92492492, 0x24924924)."""
        offsets = [0] * self.unit_words
        for word, shift, _ in self.fields():
            offsets[word] |= 1 << shift
        return tuple(offsets)


def pack_codes(codes: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """Pack codes ``0 .. 2**bits - 1`` of a 2-D array along ``axis`` into int32 words.

    :raises ValueError: on codes out of range or a packed extent that is not a
        whole number of units (a multiple of 32 codes for 3 bits).
    """
    packing = Packing(bits)
    c = np.moveaxis(np.asarray(codes, dtype=np.int64), axis, 0)
    n = c.shape[0]
    words = packing.words_for(n)
    if words is None:
        raise ValueError(f"cannot pack {n} {bits}-bit codes into whole units of int32 words")
    if c.size and (c.min() < 0 or c.max() > packing.mask):
        raise ValueError(f"{bits}-bit codes must lie in 0..{packing.mask}")
    return pack_words(codes, bits, axis=axis)  # one dense bit stream along ``axis``
