"""Where each 4-bit code sits inside an AWQ int32 word, and packing codes into words.

Used by the decoder (which slot holds a logical element) and by the encoder.
GEMM words interleave: nibble slot i (bits 4i..4i+3) of packed column c holds
logical column ``c*8 + AWQ_ORDER[i]`` (AutoAWQ ``order_map``), so logical
values [0..7] pack to 0x75316420. GEMV words are sequential: slot i holds
element i.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: GEMM: logical element AWQ_ORDER[i] of a group of eight is stored in slot i.
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
#: GEMM: logical element j of a group of eight is read from slot AWQ_REVERSE[j].
AWQ_REVERSE = tuple(AWQ_ORDER.index(j) for j in range(8))
#: GEMV: element j is in slot j.
SEQUENTIAL = tuple(range(8))


def slots_for(version: str) -> tuple[int, ...]:
    """Slot of each logical element of a group of eight, for a layout version."""
    return AWQ_REVERSE if version == "gemm" else SEQUENTIAL


def pack_int4(codes: np.ndarray, slots: Sequence[int]) -> np.ndarray:
    """Pack codes 0..15 [R, 8C] into int32 words [R, C]; element j goes to slot ``slots[j]``.

    :raises ValueError: on codes outside 0..15 or a width that is not a multiple of 8.
    """
    codes = np.asarray(codes)
    rows, width = codes.shape
    if width % 8:
        raise ValueError(f"cannot pack {width} codes per row into int32 words of 8")
    if codes.size and (codes.min() < 0 or codes.max() > 15):
        raise ValueError("4-bit codes must lie in 0..15")
    groups = codes.astype(np.uint32).reshape(rows, width // 8, 8)
    words = np.zeros((rows, width // 8), dtype=np.uint32)
    for j, slot in enumerate(slots):
        words |= groups[:, :, j] << np.uint32(4 * slot)
    return words.view(np.int32)
