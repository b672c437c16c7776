"""The ggml tensor types a GGUF file names: id, name, block size and bytes per block.

For the reader (byte lengths, the shape a tensor's bytes are presented in) and the
decoders. Sizes are ggml's (gguf-py's ``GGML_QUANT_SIZES``); a float or integer
type is a block of one element with a safetensors dtype of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Elements per super-block of the K-quants.
QK_K = 256


@dataclass(frozen=True)
class GGMLType:
    """One ggml type.

    :ivar plain: the safetensors dtype of a one-element type (``F32``), else None:
        a block type, whose bytes are presented as ``U8``.
    """

    id: int
    name: str
    block: int
    nbytes: int
    plain: str | None = None


TYPES: dict[int, GGMLType] = {
    t.id: t
    for t in (
        GGMLType(0, "F32", 1, 4, "F32"),
        GGMLType(1, "F16", 1, 2, "F16"),
        GGMLType(2, "Q4_0", 32, 18),
        GGMLType(3, "Q4_1", 32, 20),
        GGMLType(6, "Q5_0", 32, 22),
        GGMLType(7, "Q5_1", 32, 24),
        GGMLType(8, "Q8_0", 32, 34),
        GGMLType(10, "Q2_K", QK_K, 84),
        GGMLType(11, "Q3_K", QK_K, 110),
        GGMLType(12, "Q4_K", QK_K, 144),
        GGMLType(13, "Q5_K", QK_K, 176),
        GGMLType(14, "Q6_K", QK_K, 210),
        GGMLType(20, "IQ4_NL", 32, 18),
        GGMLType(23, "IQ4_XS", QK_K, 136),
        GGMLType(24, "I8", 1, 1, "I8"),
        GGMLType(25, "I16", 1, 2, "I16"),
        GGMLType(26, "I32", 1, 4, "I32"),
        GGMLType(27, "I64", 1, 8, "I64"),
        GGMLType(28, "F64", 1, 8, "F64"),
        GGMLType(30, "BF16", 1, 2, "BF16"),
    )
}
BY_NAME = {t.name: t for t in TYPES.values()}
#: Names of the ggml types llama.cpp knows that flexq does not decode (for messages).
UNSUPPORTED = {
    9: "Q8_1", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
    21: "IQ3_S", 22: "IQ2_S", 29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}  # fmt: skip
