"""Find the AutoAWQ INT4 linears of a checkpoint: config keys, tensor names, shapes.

Used by the plugin hooks. Reads ``config.json``'s ``quantization_config`` and
the tensor headers only (no tensor data), validates everything the decoder
relies on, and remembers the result per :class:`flexq.Checkpoint`.

The layouts (AutoAWQ ``awq/modules/linear/gemm.py`` and ``gemv.py``):

- GEMM: ``X.qweight`` I32 [in, out/8], ``X.qzeros`` I32 [in/g, out/8],
  ``X.scales`` F16 [in/g, out]; packed along out.
- GEMV: ``X.qweight`` I32 [out, in/8], ``X.qzeros`` I32 [out, W],
  ``X.scales`` F16 [out, 8W]; packed along in; W is the padded group-column
  count of :func:`gemv_zeros_width`.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from flexq import Checkpoint, FormatError

#: the name this format is registered under (entry point ``int4-awq``).
FORMAT_NAME = "int4-awq"
PACK = 8  # 4-bit codes per int32
COMPONENTS = ("qweight", "qzeros", "scales")
#: safetensors dtype of the scales -> Paddle dtype name of the logical weight.
SCALE_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}

Version = Literal["gemm", "gemv"]


@dataclass(frozen=True)
class AwqConfig:
    """The ``quantization_config`` keys this format reads, validated."""

    bits: int
    #: as written in the config; -1 means one group over the whole input.
    group_size: int
    zero_point: bool
    version: Version
    modules_to_not_convert: tuple[str, ...]


@dataclass(frozen=True)
class AwqLinear:
    """One quantized linear: the logical ``X.weight`` [out, in] and its three components."""

    prefix: str
    version: Version
    out_features: int
    in_features: int
    #: resolved group size (never -1).
    group_size: int
    #: safetensors dtype of ``X.scales``.
    scale_dtype: str

    @property
    def logical_key(self) -> str:
        return f"{self.prefix}.weight"

    @property
    def qweight(self) -> str:
        return f"{self.prefix}.qweight"

    @property
    def qzeros(self) -> str:
        return f"{self.prefix}.qzeros"

    @property
    def scales(self) -> str:
        return f"{self.prefix}.scales"

    @property
    def sources(self) -> list[str]:
        return [self.qweight, self.qzeros, self.scales]

    @property
    def n_groups(self) -> int:
        return self.in_features // self.group_size


@dataclass(frozen=True)
class AwqCheckpoint:
    """Everything the hooks need about one AWQ checkpoint."""

    config: AwqConfig
    #: logical key (``X.weight``) -> its linear.
    linears: Mapping[str, AwqLinear]
    #: every physical key that is an AWQ component, used or not.
    recognized: frozenset[str]


_MEMO: weakref.WeakKeyDictionary[Checkpoint, AwqCheckpoint | None] = weakref.WeakKeyDictionary()


def analyze(ckpt: Checkpoint) -> AwqCheckpoint | None:
    """The AWQ linears of ``ckpt``, or None when its config does not say ``quant_method: awq``.

    :raises FormatError: on an unsupported config or a broken linear.
    """
    if ckpt in _MEMO:
        return _MEMO[ckpt]
    config = parse_config(ckpt)
    result = None
    if config is not None:
        suffixes = tuple(f".{c}" for c in COMPONENTS)
        recognized = frozenset(k for k in ckpt.tensors if k.endswith(suffixes))
        linears = {}
        for key in sorted(ckpt.tensors):
            if key.endswith(".qweight"):
                linear = _linear(ckpt, config, key.removesuffix(".qweight"))
                linears[linear.logical_key] = linear
        if not linears:
            # The config and the tensors disagree (an FP8 or plain checkpoint with
            # an AWQ config): loading would silently skip the quantization.
            dtypes = ", ".join(sorted({t.dtype for t in ckpt.tensors.values()}))
            raise FormatError(
                f"{ckpt.path / 'config.json'}: quantization_config says quant_method 'awq', "
                f"but no tensor is an AWQ '<module>.qweight' (tensor dtypes: {dtypes}) "
                f"(format {FORMAT_NAME!r})"
            )
        result = AwqCheckpoint(config, linears, recognized)
    _MEMO[ckpt] = result
    return result


def parse_config(ckpt: Checkpoint) -> AwqConfig | None:
    """Read and check the AWQ keys of ``quantization_config`` (None if not an AWQ checkpoint)."""
    qc = ckpt.quantization_config
    method = qc.get("quant_method")
    if not isinstance(method, str) or method.lower() != "awq":
        return None
    where = f"{ckpt.path / 'config.json'}: quantization_config"

    def fail(msg: str) -> FormatError:
        return FormatError(f"{where}: {msg} (format {FORMAT_NAME!r})")

    bits = _int_key(qc, ("bits", "w_bit"), fail)
    if bits != 4:
        raise fail(f"{bits}-bit AWQ is not supported; AutoAWQ packs 4-bit weights only")
    group_size = _int_key(qc, ("group_size", "q_group_size"), fail)
    if group_size != -1 and group_size <= 0:
        raise fail(f"group_size must be -1 or positive, got {group_size}")
    zero_point = qc.get("zero_point", True)
    if not isinstance(zero_point, bool):
        raise fail(f"zero_point must be true or false, got {zero_point!r}")
    if not zero_point:
        # AutoAWQ's symmetric mode (pseudo_quantize_tensor with zero_point off)
        # returns zeros=None, and WQLinear_GEMM/GEMV.from_linear assert
        # `zeros is not None`: no AutoAWQ GEMM/GEMV checkpoint stores it, and
        # no AWQ kernel defines how to read one.
        raise fail(
            "zero_point: false is not supported: AutoAWQ cannot pack symmetric "
            "(zero-point-free) weights into its GEMM/GEMV layouts, so no such "
            "checkpoint format is defined"
        )
    version = qc.get("version", "gemm")
    if not isinstance(version, str) or version.lower() not in ("gemm", "gemv"):
        raise fail(f"version {version!r} is not supported (supported: 'gemm', 'gemv')")
    skip = qc.get("modules_to_not_convert") or []
    if not isinstance(skip, list) or not all(isinstance(m, str) for m in skip):
        raise fail(f"modules_to_not_convert must be a list of names, got {skip!r}")
    v: Version = "gemm" if version.lower() == "gemm" else "gemv"
    return AwqConfig(bits, group_size, zero_point, v, tuple(skip))


def _int_key(qc: Mapping[str, Any], names: tuple[str, str], fail: Any) -> int:
    """The integer under either spelling of a key (AutoAWQ's or transformers')."""
    found = {n: qc[n] for n in names if qc.get(n) is not None}
    if not found:
        raise fail(f"needs {names[0]!r} (or {names[1]!r})")
    values = set(found.values())
    if len(values) > 1:
        raise fail(f"{names[0]!r} and {names[1]!r} disagree: {found}")
    value = values.pop()
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(f"{next(iter(found))!r} must be an integer, got {value!r}")
    return value


def gemv_zeros_width(n_groups: int, group_size: int) -> int | None:
    """Packed columns of a GEMV ``qzeros`` (AutoAWQ ``calculate_zeros_width``).

    Group columns are packed 8 per int32 and the count is rounded up to a
    multiple of 1 (g >= 128), 2 (g = 64) or 4 (g = 32) for the kernel's
    vector loads. None for a group size AutoAWQ's GEMV does not support.
    """
    multiple = 1 if group_size >= 128 else {64: 2, 32: 4}.get(group_size)
    if multiple is None:
        return None
    width = -(-n_groups // PACK)
    return -(-width // multiple) * multiple


def _linear(ckpt: Checkpoint, config: AwqConfig, prefix: str) -> AwqLinear:
    """Check one ``prefix.qweight`` and its companions; describe the linear."""
    qweight = ckpt.tensors[f"{prefix}.qweight"]

    def fail(key: str, msg: str) -> FormatError:
        file = ckpt.tensors[key].file if key in ckpt.tensors else qweight.file
        return FormatError(f"{file}: tensor {key!r}: {msg} (format {FORMAT_NAME!r})")

    for module in config.modules_to_not_convert:
        # AutoAWQ and vLLM skip every linear whose name contains the entry.
        if module in prefix:
            raise fail(
                qweight.key,
                f"is quantized, but modules_to_not_convert lists {module!r}, "
                "so readers would treat it as an unquantized layer",
            )
    for comp in ("qzeros", "scales"):
        if f"{prefix}.{comp}" not in ckpt.tensors:
            raise fail(qweight.key, f"has no companion {prefix}.{comp!s} (missing component)")
    qzeros, scales = ckpt.tensors[f"{prefix}.qzeros"], ckpt.tensors[f"{prefix}.scales"]
    for info, allowed in ((qweight, ("I32",)), (qzeros, ("I32",)), (scales, tuple(SCALE_DTYPES))):
        if info.dtype not in allowed:
            raise fail(info.key, f"has dtype {info.dtype}, expected {' or '.join(allowed)}")
        if len(info.shape) != 2:
            raise fail(info.key, f"has shape {info.shape}, expected a 2-D tensor")
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
