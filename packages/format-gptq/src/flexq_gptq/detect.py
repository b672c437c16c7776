"""Find the GPTQ linears of a checkpoint from its headers and config (no tensor data read).

A checkpoint is GPTQ when ``quantization_config.quant_method`` (or AutoGPTQ's
``quantize_config.json`` when config.json has none) is one of
:data:`flexq_gptq.config.GPTQ_METHODS` or ``AUTO_ROUND_METHODS``; every
``X.qweight`` is then a linear with ``X.qzeros``, ``X.scales`` and optionally
``X.g_idx`` beside it. The analysis runs once per :class:`flexq.Checkpoint`.

Rules (each pinned by a test):
- a missing companion, a stored ``X.weight`` beside ``X.qweight``, a wrong
  dtype or a shape that does not fit the bits and group size is a
  :class:`flexq.FormatError` naming file, tensor and format;
- a quantized module the config leaves unquantized (an ignore list,
  a ``-:`` rule of ``dynamic``, ``extra_config`` bits >= 16, outside
  ``block_name_to_quantize`` / ``modules_in_block_to_quantize``, ``lm_head:
  false``) is an error: its readers would treat it as a plain layer;
- every ``.qweight``/``.qzeros``/``.scales``/``.g_idx`` key is recognised, so
  one without its linear is reported as an orphan;
- GPTQ tensors (``X.qweight`` beside ``X.g_idx``) in a checkpoint whose config
  names no quantization method are an error: bits and zero convention unknown.
"""

from __future__ import annotations

from flexq import Checkpoint, FormatError, TensorInfo
from flexq.formatkit import (
    Analysis,
    cached_per_checkpoint,
    check_stored,
    natural_dtype,
    qweight_analysis,
    require_companions,
)
from flexq_gptq.config import FORMAT_NAME, GptqConfig, parse_config, quant_config_of
from flexq_gptq.layout import COMPONENTS, SCALE_DTYPES, GptqLinear
from flexq_gptq.packing import Packing


@cached_per_checkpoint
def analyze(ckpt: Checkpoint) -> Analysis[GptqLinear] | None:
    """The GPTQ linears of ``ckpt`` by logical key (``X.weight``) and every key that is
    a GPTQ component, used or not; None when it is not a GPTQ checkpoint.

    :raises FormatError: on a bad config or a broken linear.
    """
    config = parse_config(ckpt)
    if config is None:
        _refuse_unconfigured(ckpt)
        return None
    return qweight_analysis(
        ckpt,
        COMPONENTS,
        lambda prefix: _linear(ckpt, config, prefix),
        where=config.where,
        method=config.method,
        format_name=FORMAT_NAME,
    )


def _refuse_unconfigured(ckpt: Checkpoint) -> None:
    if quant_config_of(ckpt)[0].get("quant_method") is not None:
        return  # another method: another format's checkpoint
    for key in ckpt.tensors:
        if key.endswith(".qweight") and f"{key.removesuffix('.qweight')}.g_idx" in ckpt.tensors:
            raise FormatError(
                f"{ckpt.tensors[key].file}: tensor {key!r} is a GPTQ packed weight, but "
                f"{ckpt.path / 'config.json'} has no quantization_config, so its bits and "
                f"zero convention are unknown (format {FORMAT_NAME!r})"
            )


def _linear(ckpt: Checkpoint, config: GptqConfig, prefix: str) -> GptqLinear:
    """Check one ``prefix.qweight`` and its companions; describe the linear."""
    qweight = ckpt.tensors[f"{prefix}.qweight"]

    def fail(key: str, msg: str) -> FormatError:
        file = ckpt.tensors[key].file if key in ckpt.tensors else qweight.file
        return FormatError(f"{file}: tensor {key!r} {msg} (format {FORMAT_NAME!r})")

    scheme = config.scheme_of(prefix)
    if isinstance(scheme, str):
        raise fail(
            qweight.key,
            f"is quantized, but {config.where}: {scheme}, so readers would treat "
            f"{prefix!r} as an unquantized layer",
        )
    if f"{prefix}.weight" in ckpt.tensors:
        raise fail(
            qweight.key,
            f"sits beside a stored {prefix}.weight: the module would have two weights",
        )
    require_companions(ckpt.tensors, prefix, ("qzeros", "scales"), fail)
    has_g_idx = f"{prefix}.g_idx" in ckpt.tensors
    if scheme.desc_act and not has_g_idx:
        raise fail(qweight.key, f"has no {prefix}.g_idx, which desc_act: true needs")
    qzeros, scales = ckpt.tensors[f"{prefix}.qzeros"], ckpt.tensors[f"{prefix}.scales"]
    checks = [(qweight, ("I32",), 2), (qzeros, ("I32",), 2), (scales, tuple(SCALE_DTYPES), 2)]
    if has_g_idx:
        checks.append((ckpt.tensors[f"{prefix}.g_idx"], ("I32",), 1))
    check_stored(checks, fail)
    bits = scheme.bits
    packing = Packing(bits)
    rows, out_f = qweight.shape
    in_f = packing.codes_for(rows)
    if in_f is None or in_f == 0 or out_f == 0:
        raise fail(
            qweight.key,
            f"has shape {qweight.shape}: {rows} rows are not a positive whole number of "
            f"{bits}-bit units ({packing.unit_words} int32 words per {packing.unit_codes} inputs)",
        )
    z_cols = packing.words_for(out_f)
    if z_cols is None:
        raise fail(
            qweight.key,
            f"has {out_f} output features, not a multiple of {packing.unit_codes}, "
            f"so {bits}-bit qzeros cannot pack them",
        )
    g = in_f if scheme.group_size == -1 else scheme.group_size
    n_groups = -(-in_f // g)
    expected: list[tuple[TensorInfo, tuple[int, ...]]] = [
        (qzeros, (n_groups, z_cols)),
        (scales, (n_groups, out_f)),
    ]
    if has_g_idx:
        expected.append((ckpt.tensors[f"{prefix}.g_idx"], (in_f,)))
    for info, want in expected:
        if info.shape != want:
            raise fail(
                info.key,
                f"has shape {info.shape}, expected {want} for {bits}-bit qweight "
                f"{qweight.shape} with group_size {scheme.group_size}",
            )
    return GptqLinear(
        prefix,
        bits,
        in_f,
        out_f,
        g,
        config.zeros_minus_one,
        scales.dtype,
        has_g_idx,
        has_g_idx and scheme.desc_act,
        natural_dtype(ckpt, default=SCALE_DTYPES[scales.dtype]),
    )
