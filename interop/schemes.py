"""The expectation table: producer scheme -> builder, the flexq format that decodes it,
and the quantization method a refusal must name when that format is not installed.

The rows of the producers here, and those a format package carries itself: every
``packages/*/interop/*_schemes.py`` module's ``SCHEMES`` (a new format's interop rows
live in its own directory; its producer pin is its pyproject's ``[tool.flexq.interop]``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from .producers import autoawq_schemes as awq
from .producers import autoround_schemes as ar
from .producers import bitsandbytes_schemes as bnb
from .producers import llmcompressor_schemes as lc
from .producers import modelopt_schemes as mo
from .scheme import Product, Scheme

__all__ = ["BY_NAME", "SCHEMES", "Product", "Scheme"]

#: Tolerances: FP8 ~0.03, 8-bit int ~0.007, 4-bit ~0.1 (GPTQ on 4 random samples
#: and AWQ, which also rescales input columns, up to ~0.2) on this model.
_HERE = (
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
)


def package_schemes(root: Path) -> list[Scheme]:
    """The rows every format package under ``root/packages`` carries in its
    ``interop/*_schemes.py`` (imported by path: the directories are not packages)."""
    rows: list[Scheme] = []
    for path in sorted(root.glob("packages/*/interop/*_schemes.py")):
        name = f"{__package__}._{path.parent.parent.name.replace('-', '_')}_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None, path
        assert spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        rows.extend(module.SCHEMES)
    return rows


SCHEMES: tuple[Scheme, ...] = (*_HERE, *package_schemes(Path(__file__).resolve().parents[1]))
BY_NAME = {s.name: s for s in SCHEMES}
