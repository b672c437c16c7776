"""Where the bytes of one bitsandbytes logical tensor live, for the detector, planner and decoder.

Two layouts (names as ``Linear4bit`` / ``Linear8bitLt`` and transformers'
``save_pretrained`` write them, for a parameter ``X.weight``):

- 4-bit (NF4 / FP4): ``X.weight`` U8 ``[ceil(n/2), 1]`` holds the codes of the
  FLATTENED tensor (n elements, row-major), element 2k in the HIGH nibble of
  byte k; blocks of ``blocksize`` consecutive flat elements share one absmax.
  ``X.weight.absmax`` is F32 ``[blocks]``, or with double quantization U8
  codes into ``X.weight.nested_quant_map`` F32 [256], scaled by
  ``X.weight.nested_absmax`` F32 (one per ``nested_blocksize`` blocks) plus the
  blob's ``nested_offset``. ``X.weight.quant_map`` F32 [16] is the code book and
  ``X.weight.quant_state.bitsandbytes__<type>`` a U8 JSON blob with the shape,
  dtype and block sizes (:mod:`flexq_bitsandbytes.quantstate`).
- LLM.int8: ``X.weight`` I8 ``[out, in]``, ``X.SCB`` F32 ``[out]`` (row absmax)
  and ``X.weight_format`` U8 scalar (0 = row-major, the only layout bnb still
  loads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ABSMAX = ".absmax"
QUANT_MAP = ".quant_map"
NESTED_ABSMAX = ".nested_absmax"
NESTED_QUANT_MAP = ".nested_quant_map"
QUANT_STATE = ".quant_state.bitsandbytes__"
#: suffixes of every 4-bit companion of a parameter key.
FOUR_BIT_SUFFIXES = (ABSMAX, QUANT_MAP, NESTED_ABSMAX, NESTED_QUANT_MAP)
SCB = ".SCB"
WEIGHT_FORMAT = ".weight_format"
#: ``weight_format`` value of row-major int8 weights (bnb's LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING).
ROW_FORMAT = 0
#: bnb's reciprocal of 127 (``int8_vectorwise_dequant``), multiplied as a float32.
INV_127 = 7.874015718698502e-3


@dataclass(frozen=True)
class Nested:
    """Double quantization of the absmax values.

    :ivar offset: the blob's ``nested_offset`` rounded to float32 (bnb adds it
        as a float32 tensor).
    """

    absmax_key: str
    quant_map_key: str
    blocksize: int
    offset: float


@dataclass(frozen=True)
class FourBit:
    """One NF4/FP4 parameter and its components.

    :ivar key: the logical key, which is also the packed codes' key.
    :ivar shape: logical shape (the blob's ``shape``).
    :ivar dtype: natural dtype (the blob's ``dtype``: what bnb dequantizes to).
    :ivar state_bytes: length of the blob tensor.
    """

    key: str
    absmax_key: str
    quant_map_key: str
    state_key: str
    quant_type: str
    blocksize: int
    shape: tuple[int, ...]
    dtype: str
    nested: Nested | None
    state_bytes: int

    @property
    def n(self) -> int:
        """Elements of the flattened tensor."""
        return math.prod(self.shape)

    @property
    def row_len(self) -> int:
        """Flat elements per index of dim 0 (1 for a vector)."""
        return math.prod(self.shape[1:])

    @property
    def n_blocks(self) -> int:
        return -(-self.n // self.blocksize)

    @property
    def packed_bytes(self) -> int:
        return -(-self.n // 2)

    @property
    def sources(self) -> list[str]:
        keys = [self.key, self.absmax_key, self.quant_map_key, self.state_key]
        if self.nested is not None:
            keys += [self.nested.absmax_key, self.nested.quant_map_key]
        return keys


@dataclass(frozen=True)
class Int8:
    """One LLM.int8 weight ``[out, in]``: int8 codes and one absmax per row.

    :ivar format_shape: header shape of ``weight_format`` (``()`` or ``(1,)``).
    """

    key: str
    scb_key: str
    format_key: str | None
    shape: tuple[int, int]
    dtype: str
    format_shape: tuple[int, ...] = ()

    @property
    def sources(self) -> list[str]:
        return [self.key, self.scb_key, *([self.format_key] if self.format_key else [])]
