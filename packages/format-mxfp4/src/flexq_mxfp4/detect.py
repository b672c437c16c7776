"""Find the MXFP4 tensors of a checkpoint from its header inventory and config.json.

Used by the plugin hooks (memoized per :class:`flexq.Checkpoint`). The rules,
chosen so that hybrid checkpoints (MXFP4 experts next to FP8 attention) work:

- A tensor is claimed only as part of a *pair* of packed codes and scales with
  matching shapes and one-byte dtypes; a lone one-byte tensor is never claimed,
  and ``X.weight`` / ``X.weight_scale`` (FP8's names) are never touched.
- gpt-oss names (``P_blocks`` U8/F4 + ``P_scales`` U8/F8_E8M0) are specific
  enough to be trusted without a config: blocks without scales, or a pair with
  mismatched shapes, is a :class:`flexq.FormatError`; lone scales are reported
  through the recognized keys as orphans.
- compressed-tensors names (``X.weight_packed`` + ``X.weight_scale``) are shared
  with NVFP4 and INT4, so a pair is ours only with a one-byte E8M0 scale, no
  ``weight_global_scale`` (NVFP4's marker), and a config that does not name a
  different compressed-tensors format. A ``weight_packed`` without scale is an
  error only when the config declares ``mxfp4-pack-quantized``.
- A pair inside a module that ``modules_to_not_convert`` (gpt-oss) or
  ``ignore`` (compressed-tensors) excludes contradicts the config: error.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from flexq import Checkpoint, FormatError, TensorInfo
from flexq_mxfp4.layout import (
    BLOCK_BYTES,
    CT_PACKED,
    CT_SCALE,
    GPT_OSS_BLOCKS,
    GPT_OSS_SCALES,
    PACKED_DTYPES,
    SCALE_DTYPES,
    MxTensor,
    n_blocks,
)

FORMAT = "mxfp4"
CT_FORMAT = "mxfp4-pack-quantized"
OUTPUT_DTYPES = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class Analysis:
    """What this format found in one checkpoint.

    :ivar tensors: logical key -> its components.
    :ivar recognized: every physical key of this format, used or not (for orphan reports).
    :ivar dtype: natural dtype of the logical tensors (the model's dtype, else bfloat16).
    """

    tensors: dict[str, MxTensor]
    recognized: frozenset[str]
    dtype: str


_MEMO: weakref.WeakKeyDictionary[Checkpoint, Analysis] = weakref.WeakKeyDictionary()


def analyze(ckpt: Checkpoint) -> Analysis:
    """The MXFP4 tensors of ``ckpt`` (computed once per checkpoint).

    :raises FormatError: on blocks without scales, mismatched pairs, or pairs the
        config says are not quantized.
    """
    found = _MEMO.get(ckpt)
    if found is None:
        found = _analyze(ckpt)
        _MEMO[ckpt] = found
    return found


def _analyze(ckpt: Checkpoint) -> Analysis:
    qc = ckpt.quantization_config
    excluded = _excluded_patterns(qc)
    tensors: dict[str, MxTensor] = {}
    recognized: set[str] = set()
    for key, info in ckpt.tensors.items():
        if key.endswith(GPT_OSS_SCALES) and info.dtype in SCALE_DTYPES:
            recognized.add(key)
        found = _gpt_oss_pair(ckpt, key, info) or _ct_pair(ckpt, key, info, qc)
        if found is None:
            continue
        for pattern in excluded:
            if _matches(found.key, pattern):
                raise FormatError(
                    f"{info.file}: tensor {key!r} is stored as MXFP4 ({FORMAT}), but its "
                    f"module matches {pattern!r}, which the config lists as not quantized"
                )
        tensors[found.key] = found
        recognized.update((found.packed_key, found.scale_key))
    return Analysis(tensors, frozenset(recognized), _model_dtype(ckpt.config))


def _gpt_oss_pair(ckpt: Checkpoint, key: str, info: TensorInfo) -> MxTensor | None:
    if not key.endswith(GPT_OSS_BLOCKS) or info.dtype not in PACKED_DTYPES:
        return None
    base = key.removesuffix(GPT_OSS_BLOCKS)
    scale = ckpt.tensors.get(base + GPT_OSS_SCALES)
    where = f"{info.file}: tensor {key!r} ({FORMAT}, gpt-oss layout)"
    if scale is None:
        raise FormatError(f"{where} has no scales tensor {base + GPT_OSS_SCALES!r}")
    if scale.dtype not in SCALE_DTYPES:
        raise FormatError(
            f"{where}: its scales {scale.key!r} in {scale.file} are {scale.dtype}, "
            f"expected one of {SCALE_DTYPES}"
        )
    block_dim = BLOCK_BYTES * (2 if info.dtype == "F4" else 1)
    if len(info.shape) < 2 or info.shape[-1] != block_dim or scale.shape != info.shape[:-1]:
        raise FormatError(
            f"{where} has shape {info.shape}, its scales {scale.key!r} in {scale.file} have "
            f"shape {scale.shape}; expected [..., G, {block_dim}] and [..., G]"
        )
    shape = (*info.shape[:-2], info.shape[-2] * 2 * BLOCK_BYTES)
    return MxTensor(base, "gpt-oss", key, scale.key, shape, info.dtype)


def _ct_pair(ckpt: Checkpoint, key: str, info: TensorInfo, qc: dict[str, Any]) -> MxTensor | None:
    if not key.endswith(CT_PACKED) or info.dtype not in PACKED_DTYPES:
        return None
    declared = _ct_formats(qc)
    if declared and CT_FORMAT not in declared:
        return None  # another compressed-tensors format (nvfp4-pack-quantized, ...)
    base = key.removesuffix(CT_PACKED)
    scale = ckpt.tensors.get(base + CT_SCALE)
    where = f"{info.file}: tensor {key!r} ({FORMAT}, compressed-tensors layout)"
    if scale is None:
        if declared:
            raise FormatError(f"{where} has no scale tensor {base + CT_SCALE!r}")
        return None
    if scale.dtype not in SCALE_DTYPES or base + "_global_scale" in ckpt.tensors:
        return None  # NVFP4 (F8_E4M3 scales plus a global scale) or another packing
    if not info.shape:
        raise FormatError(f"{where} is a scalar")
    n = info.shape[-1] * (1 if info.dtype == "F4" else 2)
    if scale.shape != (*info.shape[:-1], n_blocks(n)):
        raise FormatError(
            f"{where} has shape {info.shape} ({n} elements per row), its scale "
            f"{scale.key!r} in {scale.file} has shape {scale.shape}; expected "
            f"{(*info.shape[:-1], n_blocks(n))}"
        )
    return MxTensor(base, "compressed-tensors", key, scale.key, (*info.shape[:-1], n), info.dtype)


def _ct_formats(qc: dict[str, Any]) -> set[str]:
    """The formats a compressed-tensors config declares (empty for any other config)."""
    if qc.get("quant_method") != "compressed-tensors":
        return set()
    formats = {qc["format"]} if isinstance(qc.get("format"), str) else set()
    groups = qc.get("config_groups")
    if isinstance(groups, dict):
        for group in groups.values():
            if isinstance(group, dict) and isinstance(group.get("format"), str):
                formats.add(group["format"])
    # "mixed-precision" only says the groups carry the formats.
    formats.discard("mixed-precision")
    return formats


def _excluded_patterns(qc: dict[str, Any]) -> list[str]:
    patterns: list[str] = []
    for name in ("modules_to_not_convert", "ignore"):
        value = qc.get(name)
        if isinstance(value, list):
            patterns.extend(p for p in value if isinstance(p, str))
    return patterns


def _matches(logical_key: str, pattern: str) -> bool:
    """Whether ``logical_key`` lies in a module named by ``pattern``.

    The key and each of its parent modules (``a.b.c`` -> ``a.b``, ``a``) are
    tried: ``re:<regex>`` (compressed-tensors) must match from the start,
    anything else is a name or glob (``model.layers.*.self_attn``), or a dotted
    run of components anywhere in the key (transformers' substring rule).
    """
    parts = logical_key.split(".")
    names = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
    if pattern.startswith("re:"):
        return any(re.match(pattern[3:], name) for name in names)
    return any(fnmatchcase(name, pattern) for name in names) or (
        f".{pattern}." in f".{logical_key}."
    )


def _model_dtype(config: dict[str, Any]) -> str:
    for name in ("torch_dtype", "dtype"):
        value = config.get(name)
        if isinstance(value, str) and value.removeprefix("torch.") in OUTPUT_DTYPES:
            return value.removeprefix("torch.")
    return "bfloat16"
