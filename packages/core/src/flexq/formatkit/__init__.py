"""The format-author kit: everything a flexq format plugin needs besides the hooks.

A format package (see docs/plugin-guide.md) imports the value types and errors
from :mod:`flexq` and the rest from here:

- arrays: :class:`ArrayOps` / :func:`ops_for` (one set of exact operations over
  numpy arrays and Paddle tensors, so the math is written once), :func:`is_paddle`,
  :func:`to_numpy`;
- fast CPU decoding: :func:`for_bands`, :func:`row_runs`, :func:`for_row_runs`, :func:`lookup_into`,
  :func:`lookup_scaled`, :func:`pair_items`, :func:`run_parts`, :data:`RUNS_PER_TASK`
  (cache-sized bands on worker threads);
- elements and scales: :data:`E2M1_VALUES`, :data:`E2M1_PAIRS`, :func:`nibble_pairs`,
  :data:`E4M3_TO_FLOAT32`, :data:`E8M0_TO_FLOAT32`, :func:`scale_to_float32`,
  :func:`check_scales` (the non-finite-scale warning every format raises the same way);
- conformance: :func:`check_conformance` (fails a format whose read plans omit a
  scale-like component from ``ReadPlan.scales`` / ``ReadPlan.checks``), :func:`scale_like`;
- configs: :class:`QuantConfig` / :func:`parse_quant_config` (pydantic models of
  ``quantization_config`` with errors naming file and field; :func:`parse_json_model`
  for JSON stored in a tensor), :class:`IgnoreList`
  (the one rule for ignored modules), :func:`natural_dtype`;
- packed words: :func:`code_table`, :func:`unpack_into` (1/2/4/8-bit codes packed
  LSB-first into little-endian words, unpacked by one table lookup per byte) and
  :func:`pack_words` (any width, for encoders);
- integer groups: :func:`grouped_affine` (``(q - z) * s`` with a zero point and a
  scale per group of columns: AWQ, Quark int4/uint4);
- planning: :func:`block_cover`, :func:`ceil_div`, :func:`nibble_blocks` (4-bit codes
  with one scale per block along the last axis);
- :class:`QLinearKeys`, :func:`qweight_analysis`: the keys and the analysis of linears
  stored as ``X.qweight`` + ``X.qzeros`` + ``X.scales`` (GPTQ, AWQ);
- :func:`per_checkpoint`: analyze a checkpoint once, remember it per Checkpoint object;
- :class:`Format`, :class:`Analysis`, :class:`Layout`: the hook implementations of a
  format over its ``analyze``, ``plan`` and ``decode`` (a format's ``plugin.py`` is one
  :class:`Format` object; ``decode`` reads one box's :class:`Sources`);
  :class:`Encoder`: its ``encode`` from its quantizer;
- :data:`API_VERSION`: the kit's ``"major.minor"`` version; a format passes the one it
  was built for as ``Format(..., api_version=...)``, and one built for another major
  version is disabled with one warning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.formatkit.lazy import exports

if TYPE_CHECKING:
    from flexq.formatkit.blocks import nibble_blocks
    from flexq.formatkit.cache import per_checkpoint
    from flexq.formatkit.config import (
        QuantConfig,
        natural_dtype,
        parse_json_model,
        parse_quant_config,
        read_config_file,
    )
    from flexq.formatkit.format import Analysis, Encoder, Format, Layout, Sources
    from flexq.formatkit.groups import grouped_affine
    from flexq.formatkit.ignore import IGNORE_FIELDS, IgnoreList
    from flexq.formatkit.qlinear import QLinearKeys, qweight_analysis
    from flexq.formatkit.words import code_table, pack_words, unpack_into
    from flexq.numerics.arrays import is_paddle, to_numpy
    from flexq.numerics.bands import (
        RUNS_PER_TASK,
        for_bands,
        for_row_runs,
        lookup_into,
        lookup_scaled,
        pair_items,
        row_runs,
    )
    from flexq.numerics.elements import (
        E2M1_PAIRS,
        E2M1_VALUES,
        E4M3_TO_FLOAT32,
        E8M0_TO_FLOAT32,
        nibble_pairs,
    )
    from flexq.numerics.ops import ArrayOps, NumpyOps, PaddleOps, ops_for
    from flexq.numerics.scales import (
        FLOAT_SCALE_DTYPES,
        NONFINITE_SCALES_ENV,
        check_scales,
        scale_to_float32,
    )
    from flexq.numerics.threads import run_parts, thread_count
    from flexq.plan import block_cover, ceil_div
    from flexq.plugin.spec import API_VERSION
    from flexq.testing.plans import check_conformance, scale_like

#: Every name of the kit -> the module defining it, imported on first use: discovery
#: imports every installed format's plugin object, and a process that loads one format
#: should not pay for the rest of the kit (pydantic alone costs a fresh process ~0.1 s).
_WHERE = {
    "API_VERSION": "flexq.plugin.spec",
    "Analysis": "flexq.formatkit.format",
    "ArrayOps": "flexq.numerics.ops",
    "E2M1_PAIRS": "flexq.numerics.elements",
    "E2M1_VALUES": "flexq.numerics.elements",
    "E4M3_TO_FLOAT32": "flexq.numerics.elements",
    "E8M0_TO_FLOAT32": "flexq.numerics.elements",
    "Encoder": "flexq.formatkit.format",
    "FLOAT_SCALE_DTYPES": "flexq.numerics.scales",
    "Format": "flexq.formatkit.format",
    "IGNORE_FIELDS": "flexq.formatkit.ignore",
    "IgnoreList": "flexq.formatkit.ignore",
    "Layout": "flexq.formatkit.format",
    "NONFINITE_SCALES_ENV": "flexq.numerics.scales",
    "NumpyOps": "flexq.numerics.ops",
    "PaddleOps": "flexq.numerics.ops",
    "QLinearKeys": "flexq.formatkit.qlinear",
    "QuantConfig": "flexq.formatkit.config",
    "RUNS_PER_TASK": "flexq.numerics.bands",
    "Sources": "flexq.formatkit.format",
    "block_cover": "flexq.plan",
    "ceil_div": "flexq.plan",
    "check_conformance": "flexq.testing.plans",
    "check_scales": "flexq.numerics.scales",
    "code_table": "flexq.formatkit.words",
    "for_bands": "flexq.numerics.bands",
    "for_row_runs": "flexq.numerics.bands",
    "grouped_affine": "flexq.formatkit.groups",
    "is_paddle": "flexq.numerics.arrays",
    "lookup_into": "flexq.numerics.bands",
    "lookup_scaled": "flexq.numerics.bands",
    "natural_dtype": "flexq.formatkit.config",
    "nibble_blocks": "flexq.formatkit.blocks",
    "nibble_pairs": "flexq.numerics.elements",
    "ops_for": "flexq.numerics.ops",
    "pack_words": "flexq.formatkit.words",
    "pair_items": "flexq.numerics.bands",
    "parse_json_model": "flexq.formatkit.config",
    "parse_quant_config": "flexq.formatkit.config",
    "per_checkpoint": "flexq.formatkit.cache",
    "qweight_analysis": "flexq.formatkit.qlinear",
    "read_config_file": "flexq.formatkit.config",
    "row_runs": "flexq.numerics.bands",
    "run_parts": "flexq.numerics.threads",
    "scale_like": "flexq.testing.plans",
    "scale_to_float32": "flexq.numerics.scales",
    "thread_count": "flexq.numerics.threads",
    "to_numpy": "flexq.numerics.arrays",
    "unpack_into": "flexq.formatkit.words",
}

__getattr__ = exports(__name__, _WHERE)

__all__ = [
    "API_VERSION",
    "E2M1_PAIRS",
    "E2M1_VALUES",
    "E4M3_TO_FLOAT32",
    "E8M0_TO_FLOAT32",
    "FLOAT_SCALE_DTYPES",
    "IGNORE_FIELDS",
    "NONFINITE_SCALES_ENV",
    "RUNS_PER_TASK",
    "Analysis",
    "ArrayOps",
    "Encoder",
    "Format",
    "IgnoreList",
    "Layout",
    "NumpyOps",
    "PaddleOps",
    "QLinearKeys",
    "QuantConfig",
    "Sources",
    "block_cover",
    "ceil_div",
    "check_conformance",
    "check_scales",
    "code_table",
    "for_bands",
    "for_row_runs",
    "grouped_affine",
    "is_paddle",
    "lookup_into",
    "lookup_scaled",
    "natural_dtype",
    "nibble_blocks",
    "nibble_pairs",
    "ops_for",
    "pack_words",
    "pair_items",
    "parse_json_model",
    "parse_quant_config",
    "per_checkpoint",
    "qweight_analysis",
    "read_config_file",
    "row_runs",
    "run_parts",
    "scale_like",
    "scale_to_float32",
    "thread_count",
    "to_numpy",
    "unpack_into",
]
