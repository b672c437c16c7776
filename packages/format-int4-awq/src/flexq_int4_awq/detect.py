"""Find the AutoAWQ INT4 linears of a checkpoint from config.json and the tensor headers.

Used by the plugin hooks; reads no tensor data, validates everything the
decoder relies on, and analyzes a checkpoint once (:func:`analyze` is
memoized with :func:`flexq.formatkit.cached_per_checkpoint`). A checkpoint is AWQ
when ``quantization_config.quant_method`` is ``awq``; each ``X.qweight`` with
its ``X.qzeros`` and ``X.scales`` is one linear (:class:`AwqLinear`).
"""

from __future__ import annotations

from flexq import Checkpoint, FormatError
from flexq.formatkit import Analysis, cached_per_checkpoint, check_stored, require_companions
from flexq_int4_awq.config import FORMAT_NAME, AwqConfig, read_config
from flexq_int4_awq.layout import COMPONENTS, PACK, SCALE_DTYPES, AwqLinear, gemv_zeros_width


@cached_per_checkpoint
def analyze(ckpt: Checkpoint) -> Analysis[AwqLinear] | None:
    """The AWQ linears of ``ckpt`` (logical key ``X.weight`` -> its linear, and every
    physical key that is an AWQ component, used or not), or None when its config does
    not say ``quant_method: awq``.

    :raises FormatError: on an unsupported config or a broken linear.
    """
    try:
        config = read_config(ckpt)
    except FormatError:
        # An incomplete AWQ config over tensors that are not AWQ at all: the mismatch
        # is the problem to report, not the config's missing field.
        if not any(k.endswith(".qweight") for k in ckpt.tensors):
            raise _mismatch(ckpt) from None
        raise
    if config is None:
        return None
    suffixes = tuple(f".{c}" for c in COMPONENTS)
    recognized = frozenset(k for k in ckpt.tensors if k.endswith(suffixes))
    layouts = {}
    for key in sorted(ckpt.tensors):
        if key.endswith(".qweight"):
            linear = _linear(ckpt, config, key.removesuffix(".qweight"))
            layouts[linear.logical_key] = linear
    if not layouts:
        raise _mismatch(ckpt)
    return Analysis(layouts, recognized)


def _mismatch(ckpt: Checkpoint) -> FormatError:
    """The error for an AWQ config over tensors that are not AWQ (an FP8 or plain
    checkpoint with an AWQ config): loading would silently skip the quantization."""
    dtypes = ", ".join(sorted({t.dtype for t in ckpt.tensors.values()}))
    return FormatError(
        f"{ckpt.path / 'config.json'}: the config does not match the tensors: "
        f"quantization_config says quant_method 'awq', but no tensor is an AWQ "
        f"'<module>.qweight' (tensor dtypes: {dtypes}); use the config.json that came "
        f"with these tensors (format {FORMAT_NAME!r})"
    )


def _linear(ckpt: Checkpoint, config: AwqConfig, prefix: str) -> AwqLinear:
    """Check one ``prefix.qweight`` and its companions; describe the linear."""
    qweight = ckpt.tensors[f"{prefix}.qweight"]

    def fail(key: str, msg: str) -> FormatError:
        file = ckpt.tensors[key].file if key in ckpt.tensors else qweight.file
        return FormatError(f"{file}: tensor {key!r}: {msg} (format {FORMAT_NAME!r})")

    config.ignored.refuse(
        prefix, file=qweight.file, tensor=qweight.key, stored="quantized", format_name=FORMAT_NAME
    )
    if f"{prefix}.qzeros" not in ckpt.tensors and not config.zero_point:
        raise fail(
            qweight.key,
            f"has no {prefix}.qzeros and quantization_config.zero_point is false: "
            "AWQ's GEMM/GEMV layouts define no symmetric (zero-free) weights, "
            "only stored zeros (auto-round's auto_awq export stores them, all 8)",
        )
    require_companions(ckpt.tensors, prefix, COMPONENTS[1:], fail)
    qzeros, scales = ckpt.tensors[f"{prefix}.qzeros"], ckpt.tensors[f"{prefix}.scales"]
    check_stored(
        [(qweight, ("I32",), 2), (qzeros, ("I32",), 2), (scales, tuple(SCALE_DTYPES), 2)], fail
    )
    rows, cols = qweight.shape
    if config.version == "gemm":
        out_f, in_f = cols * PACK, rows
    else:
        out_f, in_f = rows, cols * PACK
    g = in_f if config.group_size == -1 else config.group_size
    if in_f == 0 or out_f == 0 or in_f % g:
        raise fail(
            qweight.key,
            f"has shape {qweight.shape}: in_features {in_f} is not a positive multiple "
            f"of group_size {g} ({config.version.upper()} layout)",
        )
    n_groups = in_f // g
    if config.version == "gemm":
        want_z, want_s = (n_groups, cols), (n_groups, out_f)
    else:
        width = gemv_zeros_width(n_groups, g)
        if width is None:
            raise fail(qweight.key, f"GEMV layout does not support group_size {g}")
        want_z, want_s = (out_f, width), (out_f, width * PACK)
    for info, want in ((qzeros, want_z), (scales, want_s)):
        if info.shape != want:
            raise fail(
                info.key,
                f"has shape {info.shape}, expected {want} for {config.version.upper()} "
                f"qweight {qweight.shape} with group_size {g}",
            )
    return AwqLinear(prefix, config.version, out_f, in_f, g, scales.dtype)
