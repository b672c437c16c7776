"""The expectation table: producer scheme -> builder, the flexq format that decodes it,
and the quantization method a refusal must name when that format is not installed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .producers import autoawq_schemes as awq
from .producers import autoround_schemes as ar
from .producers import bitsandbytes_schemes as bnb
from .producers import llmcompressor_schemes as lc
from .producers import modelopt_schemes as mo
from .producers import quark_schemes as quark
from .producers.base import Built

Builder = Callable[[Path, Path], Built]


@dataclass(frozen=True)
class Scheme:
    """One row of the table.

    :ivar fmt: the flexq format (entry-point name) that must decode it.
    :ivar method: what a refusal names when ``fmt`` is missing (a ``quant_method``
        or a compressed-tensors ``format``).
    :ivar tolerance: bound on ||reference - original|| / ||original|| per weight,
        a check of the oracle itself (a wrong zero point or pack order is far off).
    """

    name: str
    build: Builder
    fmt: str
    method: str
    tolerance: float


#: Tolerances: FP8 ~0.03, 8-bit int ~0.007, 4-bit ~0.1 (GPTQ on 4 random samples
#: and AWQ, which also rescales input columns, up to ~0.2) on this model.
SCHEMES = (
    Scheme("llmc-fp8-tensor", lc.fp8_tensor, "fp8", "float-quantized", 0.05),
    Scheme("llmc-fp8-channel", lc.fp8_channel, "fp8", "float-quantized", 0.05),
    Scheme("llmc-fp8-block", lc.fp8_block, "fp8", "float-quantized", 0.05),
    Scheme("llmc-mxfp8", lc.mxfp8, "fp8", "mxfp8-quantized", 0.05),
    Scheme("llmc-mxfp4", lc.mxfp4, "mxfp4", "mxfp4-pack-quantized", 0.15),
    Scheme("llmc-w4a16-sym-g32", lc.w4a16_sym, "ct-int", "pack-quantized", 0.15),
    Scheme("llmc-w4a16-asym-g128", lc.w4a16_asym, "ct-int", "pack-quantized", 0.15),
    Scheme("llmc-gptq-w4a16-actorder", lc.gptq_actorder, "ct-int", "pack-quantized", 0.25),
    Scheme("llmc-w8a16", lc.w8a16, "ct-int", "pack-quantized", 0.02),
    Scheme("llmc-w8a8", lc.w8a8, "ct-int", "int-quantized", 0.02),
    Scheme("llmc-nvfp4", lc.nvfp4, "nvfp4", "nvfp4-pack-quantized", 0.15),
    Scheme("awq-gemm-g64", awq.gemm, "int4-awq", "awq", 0.25),
    Scheme("awq-gemv-g32", awq.gemv, "int4-awq", "awq", 0.25),
    Scheme("autoround-fp8", ar.fp8, "fp8", "auto-round", 0.05),
    Scheme("autoround-fp8-static", ar.fp8_static, "fp8", "auto-round", 0.05),
    Scheme("autoround-auto-awq", ar.auto_awq, "int4-awq", "awq", 0.15),
    Scheme("autoround-auto-gptq", ar.auto_gptq, "gptq", "gptq", 0.15),
    Scheme("autoround-native", ar.native, "gptq", "auto-round", 0.15),
    Scheme("autoround-nvfp4", ar.nvfp4, "nvfp4", "auto-round", 0.15),
    Scheme("autoround-nvfp4-llmc", ar.nvfp4_llm_compressor, "nvfp4", "nvfp4-pack-quantized", 0.15),
    Scheme("modelopt-fp8", mo.fp8_tensor, "fp8", "modelopt", 0.05),
    Scheme("modelopt-fp8-pb-wo", mo.fp8_block_weight_only, "fp8", "modelopt", 0.05),
    Scheme("modelopt-nvfp4", mo.nvfp4, "nvfp4", "modelopt", 0.15),
    Scheme("bnb-nf4-double-quant", bnb.nf4, "bitsandbytes", "bitsandbytes", 0.15),
    Scheme("bnb-fp4", bnb.fp4, "bitsandbytes", "bitsandbytes", 0.15),
    Scheme("bnb-int8", bnb.int8, "bitsandbytes", "bitsandbytes", 0.02),
    Scheme("quark-fp8-tensor", quark.fp8_tensor, "quark", "quark", 0.05),
    Scheme("quark-fp8-channel", quark.fp8_channel, "quark", "quark", 0.05),
    Scheme("quark-int4-g128", quark.int4_g128, "quark", "quark", 0.2),
    Scheme("quark-uint4-g128", quark.uint4_g128, "quark", "quark", 0.15),
    Scheme("quark-mxfp4", quark.mxfp4, "quark", "quark", 0.15),
)
BY_NAME = {s.name: s for s in SCHEMES}


@dataclass(frozen=True)
class Product:
    """A scheme and the checkpoint its producer built for this session."""

    scheme: Scheme
    built: Built
