"""The format-author kit: everything a flexq format plugin needs besides the hooks.

A format package (see docs/plugin-guide.md) imports the value types and errors
from :mod:`flexq` and the rest from here:

- arrays: :class:`ArrayOps` / :func:`ops_for` (one set of exact operations over
  numpy arrays and Paddle tensors, so the math is written once), :func:`is_paddle`,
  :func:`to_numpy`;
- fast CPU decoding: :func:`run_in_bands`, :func:`row_bands`, :func:`run_in_row_bands`,
  :func:`lookup_into`, :func:`code_pairs`, :func:`lookup_scaled`, :func:`lookup_blocks`,
  :func:`pair_items`, :func:`run_on_threads`, :data:`RUNS_PER_TASK` (cache-sized bands on
  worker threads),
  :func:`lookup_rounded`, :func:`run_in_bands_rounded`, :func:`decode_in_row_bands`,
  :func:`round_in_cache`, :func:`fill_band`, :func:`banded_output`,
  :func:`float32_to_bfloat16_bits`
  (byte codes under one scale, or any banded decode, rounded straight into
  ``BoxSources.rounded_out``; the core's one rounding to bfloat16);
- elements and scales: :data:`E2M1_VALUES`, :data:`E2M1_PAIRS`, :func:`nibble_pairs`,
  :data:`E4M3_TO_FLOAT32`, :data:`E8M0_TO_FLOAT32`, :func:`scale_to_float32`,
  :func:`check_scales` (the non-finite-scale warning every format raises the same way);
- conformance: :func:`check_conformance` (fails a format whose read plans omit a
  scale-like component from ``ReadPlan.scales`` / ``ReadPlan.checks``), :func:`scale_like`;
- configs: :class:`QuantConfig` / :func:`parse_quant_config` (pydantic models of
  ``quantization_config`` with errors naming file and field; :func:`validate_config`
  for a config mapping read elsewhere; :func:`parse_json_model`
  for JSON stored in a tensor), :class:`IgnoreList`
  (the one rule for ignored modules), :func:`natural_dtype`;
- compressed-tensors configs: :func:`read_compressed_tensors` gives the one model,
  :class:`CtConfig` (declared formats, ``config_groups`` as :class:`ConfigGroup` /
  :class:`QuantArgs`, each module's :class:`CtScheme` from the targets, the ignore list),
  the same one the core's detection reads;
- packed words: :func:`code_table`, :func:`triple_table`, :func:`unpack_into` (the one
  unpacker of the GPTQ lineage: codes of 1 to 8 bits packed LSB-first into little-endian
  words, dense or padded, into float32 or int32; one table lookup per byte where the
  width divides 8, a conversion for 8 bits, one lookup per 12 bits for dense 3-bit
  codes), :func:`gather_codes` (codes by bit position), :func:`transposed_words` (a band
  of word columns as rows, for words packed along the first axis) and
  :func:`pack_words` (any width, for encoders);
- integer groups: :func:`grouped_affine` (``(q - z) * s`` with a zero point and a
  scale per group of columns: AWQ, Quark int4/uint4);
- planning: :func:`block_cover`, :func:`ceil_div`, :func:`nibble_block_boxes` (4-bit codes
  with one scale per block along the last axis);
- :class:`QLinearKeys`, :func:`qweight_analysis`: the keys and the analysis of linears
  stored as ``X.qweight`` + ``X.qzeros`` + ``X.scales`` (GPTQ, AWQ); :func:`require_companions`,
  :func:`check_stored`: one linear's component checks (present, dtype, rank);
- :func:`cached_per_checkpoint`: analyze a checkpoint once, remember it per Checkpoint object;
- :class:`Format`, :class:`Analysis`, :class:`FoundTensor`: the hook implementations of a
  format over its ``analyze``, ``plan`` and ``decode`` (a format's ``plugin.py`` is one
  :class:`Format` object; ``decode`` reads one box's :class:`BoxSources`);
  :class:`Encoder`: its ``encode`` from its quantizer;
- :data:`API_VERSION`: the kit's ``"major.minor"`` version; a format passes the one it
  was built for as ``Format(..., api_version=...)``, and one built for another major
  version is disabled with one warning.

Deprecated names: kit API 1.1 renamed eight names of 1.0 so that each says what it is
(:data:`RENAMED` maps each old name to its new one; docs/plugin-guide.md has the table).
The old names still give the same objects, without a warning, so a plugin built for 1.0
keeps working; they are not in ``__all__`` and new code should not use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.formatkit.lazy import exports

if TYPE_CHECKING:
    from flexq.formatkit.blocks import nibble_block_boxes
    from flexq.formatkit.cache import cached_per_checkpoint
    from flexq.formatkit.format import (
        Analysis,
        BoxSources,
        Encoder,
        Format,
        FoundTensor,
    )
    from flexq.formatkit.groups import grouped_affine
    from flexq.formatkit.qlinear import (
        QLinearKeys,
        check_stored,
        qweight_analysis,
        require_companions,
    )
    from flexq.numerics.arrays import (
        is_paddle,
        to_numpy,
    )
    from flexq.numerics.bands import (
        RUNS_PER_TASK,
        banded_output,
        code_pairs,
        decode_in_row_bands,
        fill_band,
        lookup_blocks,
        lookup_into,
        lookup_rounded,
        lookup_scaled,
        pair_items,
        round_in_cache,
        row_bands,
        run_in_bands,
        run_in_bands_rounded,
        run_in_row_bands,
    )
    from flexq.numerics.elements import (
        E2M1_PAIRS,
        E2M1_VALUES,
        E4M3_TO_FLOAT32,
        E8M0_TO_FLOAT32,
        nibble_pairs,
    )
    from flexq.numerics.ops import (
        ArrayOps,
        NumpyOps,
        PaddleOps,
        ops_for,
    )
    from flexq.numerics.rounding import float32_to_bfloat16_bits
    from flexq.numerics.scales import (
        FLOAT_SCALE_DTYPES,
        NONFINITE_SCALES_ENV,
        check_scales,
        scale_to_float32,
    )
    from flexq.numerics.threads import (
        run_on_threads,
        thread_count,
    )
    from flexq.numerics.words import (
        code_table,
        gather_codes,
        pack_words,
        transposed_words,
        triple_table,
        unpack_into,
    )
    from flexq.plan import (
        block_cover,
        ceil_div,
    )
    from flexq.plugin.spec import API_VERSION
    from flexq.quantconfig.base import (
        QuantConfig,
        natural_dtype,
        parse_json_model,
        parse_quant_config,
        read_config_file,
        validate_config,
    )
    from flexq.quantconfig.compressed_tensors import (
        ConfigGroup,
        CtConfig,
        CtScheme,
        QuantArgs,
        read_compressed_tensors,
    )
    from flexq.quantconfig.ignore import (
        IGNORE_FIELDS,
        IgnoreList,
    )
    from flexq.testing.plans import (
        check_conformance,
        scale_like,
    )

    # The deprecated names of kit API 1.0, for type checkers (see RENAMED).
    # rename: keep (the issue-25 codemod leaves the old names here alone)
    Layout = FoundTensor
    Sources = BoxSources
    per_checkpoint = cached_per_checkpoint
    for_bands = run_in_bands
    row_runs = row_bands
    for_row_runs = run_in_row_bands
    run_parts = run_on_threads
    nibble_blocks = nibble_block_boxes
    # rename: end

#: Every name of the kit -> the module defining it, imported on first use: discovery
#: imports every installed format's plugin object, and a process that loads one format
#: should not pay for the rest of the kit (pydantic alone costs a fresh process ~0.1 s).
_WHERE = {
    "API_VERSION": "flexq.plugin.spec",
    "Analysis": "flexq.formatkit.format",
    "ArrayOps": "flexq.numerics.ops",
    "ConfigGroup": "flexq.quantconfig.compressed_tensors",
    "CtConfig": "flexq.quantconfig.compressed_tensors",
    "CtScheme": "flexq.quantconfig.compressed_tensors",
    "E2M1_PAIRS": "flexq.numerics.elements",
    "E2M1_VALUES": "flexq.numerics.elements",
    "E4M3_TO_FLOAT32": "flexq.numerics.elements",
    "E8M0_TO_FLOAT32": "flexq.numerics.elements",
    "Encoder": "flexq.formatkit.format",
    "FLOAT_SCALE_DTYPES": "flexq.numerics.scales",
    "Format": "flexq.formatkit.format",
    "IGNORE_FIELDS": "flexq.quantconfig.ignore",
    "IgnoreList": "flexq.quantconfig.ignore",
    "FoundTensor": "flexq.formatkit.format",
    "NONFINITE_SCALES_ENV": "flexq.numerics.scales",
    "NumpyOps": "flexq.numerics.ops",
    "PaddleOps": "flexq.numerics.ops",
    "QLinearKeys": "flexq.formatkit.qlinear",
    "QuantArgs": "flexq.quantconfig.compressed_tensors",
    "QuantConfig": "flexq.quantconfig.base",
    "RUNS_PER_TASK": "flexq.numerics.bands",
    "BoxSources": "flexq.formatkit.format",
    "block_cover": "flexq.plan",
    "ceil_div": "flexq.plan",
    "check_conformance": "flexq.testing.plans",
    "check_scales": "flexq.numerics.scales",
    "check_stored": "flexq.formatkit.qlinear",
    "code_table": "flexq.numerics.words",
    "run_in_bands": "flexq.numerics.bands",
    "run_in_bands_rounded": "flexq.numerics.bands",
    "decode_in_row_bands": "flexq.numerics.bands",
    "round_in_cache": "flexq.numerics.bands",
    "fill_band": "flexq.numerics.bands",
    "banded_output": "flexq.numerics.bands",
    "run_in_row_bands": "flexq.numerics.bands",
    "gather_codes": "flexq.numerics.words",
    "grouped_affine": "flexq.formatkit.groups",
    "is_paddle": "flexq.numerics.arrays",
    "lookup_into": "flexq.numerics.bands",
    "lookup_rounded": "flexq.numerics.bands",
    "code_pairs": "flexq.numerics.bands",
    "float32_to_bfloat16_bits": "flexq.numerics.rounding",
    "lookup_scaled": "flexq.numerics.bands",
    "lookup_blocks": "flexq.numerics.bands",
    "natural_dtype": "flexq.quantconfig.base",
    "nibble_block_boxes": "flexq.formatkit.blocks",
    "nibble_pairs": "flexq.numerics.elements",
    "ops_for": "flexq.numerics.ops",
    "pack_words": "flexq.numerics.words",
    "pair_items": "flexq.numerics.bands",
    "parse_json_model": "flexq.quantconfig.base",
    "parse_quant_config": "flexq.quantconfig.base",
    "cached_per_checkpoint": "flexq.formatkit.cache",
    "qweight_analysis": "flexq.formatkit.qlinear",
    "read_compressed_tensors": "flexq.quantconfig.compressed_tensors",
    "read_config_file": "flexq.quantconfig.base",
    "require_companions": "flexq.formatkit.qlinear",
    "row_bands": "flexq.numerics.bands",
    "run_on_threads": "flexq.numerics.threads",
    "scale_like": "flexq.testing.plans",
    "scale_to_float32": "flexq.numerics.scales",
    "thread_count": "flexq.numerics.threads",
    "to_numpy": "flexq.numerics.arrays",
    "transposed_words": "flexq.numerics.words",
    "triple_table": "flexq.numerics.words",
    "unpack_into": "flexq.numerics.words",
    "validate_config": "flexq.quantconfig.base",
}

#: Old name (kit API 1.0) -> its name since 1.1. Each old name gives the new name's object,
#: silently: plugins built for 1.0 import them and keep working (docs/plugin-guide.md).
# rename: keep
RENAMED = {
    "Layout": "FoundTensor",
    "Sources": "BoxSources",
    "per_checkpoint": "cached_per_checkpoint",
    "for_bands": "run_in_bands",
    "row_runs": "row_bands",
    "for_row_runs": "run_in_row_bands",
    "run_parts": "run_on_threads",
    "nibble_blocks": "nibble_block_boxes",
}
# rename: end

__getattr__ = exports(__name__, _WHERE, RENAMED)

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
    "BoxSources",
    "ConfigGroup",
    "CtConfig",
    "CtScheme",
    "Encoder",
    "Format",
    "FoundTensor",
    "IgnoreList",
    "NumpyOps",
    "PaddleOps",
    "QLinearKeys",
    "QuantArgs",
    "QuantConfig",
    "banded_output",
    "block_cover",
    "cached_per_checkpoint",
    "ceil_div",
    "check_conformance",
    "check_scales",
    "check_stored",
    "code_pairs",
    "code_table",
    "decode_in_row_bands",
    "fill_band",
    "float32_to_bfloat16_bits",
    "gather_codes",
    "grouped_affine",
    "is_paddle",
    "lookup_blocks",
    "lookup_into",
    "lookup_rounded",
    "lookup_scaled",
    "natural_dtype",
    "nibble_block_boxes",
    "nibble_pairs",
    "ops_for",
    "pack_words",
    "pair_items",
    "parse_json_model",
    "parse_quant_config",
    "qweight_analysis",
    "read_compressed_tensors",
    "read_config_file",
    "require_companions",
    "round_in_cache",
    "row_bands",
    "run_in_bands",
    "run_in_bands_rounded",
    "run_in_row_bands",
    "run_on_threads",
    "scale_like",
    "scale_to_float32",
    "thread_count",
    "to_numpy",
    "transposed_words",
    "triple_table",
    "unpack_into",
    "validate_config",
]
