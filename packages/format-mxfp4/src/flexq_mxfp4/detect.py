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
- A pair inside a module that the config's ignore lists exclude
  (``modules_to_not_convert`` for gpt-oss, ``ignore`` for compressed-tensors;
  :class:`flexq.formatkit.IgnoreList`) contradicts the config: error.

The analysis runs once per :class:`flexq.Checkpoint` (:func:`analyze` is
memoized with :func:`flexq.formatkit.cached_per_checkpoint`).
"""

from __future__ import annotations

from flexq import Checkpoint, FormatError, TensorInfo
from flexq.formatkit import Analysis, cached_per_checkpoint, natural_dtype
from flexq_mxfp4.config import CT_FORMAT, FORMAT_NAME, MxConfig, read_config
from flexq_mxfp4.layout import (
    BLOCK_BYTES,
    PACKED_DTYPES,
    SCALE_DTYPES,
    SUFFIXES,
    MxTensor,
    n_blocks,
)

GPT_OSS_BLOCKS, GPT_OSS_SCALES = SUFFIXES["gpt-oss"]
CT_PACKED, CT_SCALE = SUFFIXES["compressed-tensors"]


@cached_per_checkpoint
def analyze(ckpt: Checkpoint) -> Analysis[MxTensor]:
    """The MXFP4 tensors of ``ckpt`` (computed once per checkpoint): logical key -> its
    components, and every physical key of this format, used or not (for orphan reports).

    :raises FormatError: on blocks without scales, mismatched pairs, or pairs the
        config says are not quantized.
    """
    config = read_config(ckpt)
    dtype = natural_dtype(ckpt)
    layouts: dict[str, MxTensor] = {}
    recognized: set[str] = set()
    for key, info in ckpt.tensors.items():
        if (key.endswith(GPT_OSS_SCALES) and info.dtype in SCALE_DTYPES) or (
            key.endswith(CT_SCALE) and info.dtype in SCALE_DTYPES and CT_FORMAT in config.ct_formats
        ):
            recognized.add(key)
        found = _gpt_oss_pair(ckpt, key, info, dtype) or _ct_pair(ckpt, key, info, config, dtype)
        if found is None:
            continue
        config.ignored.refuse(
            found.key, file=info.file, tensor=key, stored="stored as MXFP4", format_name=FORMAT_NAME
        )
        layouts[found.key] = found
        recognized.update((found.packed_key, found.scale_key))
    return Analysis(layouts, frozenset(recognized))


def _gpt_oss_pair(ckpt: Checkpoint, key: str, info: TensorInfo, dtype: str) -> MxTensor | None:
    if not key.endswith(GPT_OSS_BLOCKS) or info.dtype not in PACKED_DTYPES:
        return None
    base = key.removesuffix(GPT_OSS_BLOCKS)
    scale = ckpt.tensors.get(base + GPT_OSS_SCALES)
    where = f"{info.file}: tensor {key!r} ({FORMAT_NAME}, gpt-oss layout)"
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
    stored = (*info.shape[:-2], info.shape[-2] * 2 * BLOCK_BYTES)
    return MxTensor(base, "gpt-oss", key, scale.key, stored, info.dtype, dtype)


def _ct_pair(
    ckpt: Checkpoint, key: str, info: TensorInfo, config: MxConfig, dtype: str
) -> MxTensor | None:
    if not key.endswith(CT_PACKED) or info.dtype not in PACKED_DTYPES:
        return None
    declared = config.ct_formats
    if declared and CT_FORMAT not in declared:
        return None  # another compressed-tensors format (nvfp4-pack-quantized, ...)
    base = key.removesuffix(CT_PACKED)
    scale = ckpt.tensors.get(base + CT_SCALE)
    where = f"{info.file}: tensor {key!r} ({FORMAT_NAME}, compressed-tensors layout)"
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
    return MxTensor(
        base, "compressed-tensors", key, scale.key, (*info.shape[:-1], n), info.dtype, dtype
    )
