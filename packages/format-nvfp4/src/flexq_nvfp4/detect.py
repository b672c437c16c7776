"""Find the NVFP4 tensors of a checkpoint from its header inventory and config.

The format's ``analyze`` (memoized per :class:`flexq.Checkpoint`). The rules,
chosen so that NVFP4 next to FP8, MXFP4 or INT4 tensors goes to the right format:

- A tensor is claimed only as a *triple*: U8 codes, an F8_E4M3 block scale and
  an F32 global scale. compressed-tensors names them ``X.weight_packed``,
  ``X.weight_scale``, ``X.weight_global_scale``; ModelOpt ``X.weight``,
  ``X.weight_scale``, ``X.weight_scale_2``. MXFP4's pairs (a U8 / E8M0 scale, no
  global scale) and INT4's I32 ``weight_packed`` are never claimed, nor is an
  F8_E4M3 ``X.weight`` (FP8's).
- What is clearly NVFP4 but incomplete is a :class:`flexq.FormatError`: a global
  scale or an F8_E4M3 block scale beside U8 codes with a companion missing, of
  the wrong dtype or shape; a ``weight_packed`` without scales when the config
  declares only ``nvfp4-pack-quantized``; a ModelOpt triple in a module whose
  ``quant_algo`` is not an NVFP4 one.
- A triple inside a module that ``ignore`` / ``exclude_modules`` lists contradicts
  the config: error.
- A global scale no claimed tensor uses is recognized, so the core reports it as
  an orphan. Activation scales (``input_scale``, ``input_global_scale``) are not
  weights: they pass through.
"""

from __future__ import annotations

import math
from dataclasses import replace

from flexq import Checkpoint, FormatError, TensorInfo
from flexq.formatkit import Analysis, cached_per_checkpoint, natural_dtype
from flexq_nvfp4.config import CT_FORMAT, FORMAT, MODELOPT_ALGOS, Nvfp4Config, read_config
from flexq_nvfp4.layout import (
    CT_GLOBAL,
    CT_PACKED,
    CT_SCALE,
    GLOBAL_DTYPE,
    MO_GLOBAL,
    MO_SCALE,
    MO_WEIGHT,
    PACKED_DTYPE,
    SCALE_DTYPE,
    Nvfp4Tensor,
    Producer,
    n_blocks,
)


@cached_per_checkpoint
def analyze(ckpt: Checkpoint) -> Analysis[Nvfp4Tensor]:
    """The NVFP4 tensors of ``ckpt`` by logical key, and every physical key of this
    format, used or orphaned (computed once per checkpoint). Their natural dtype is
    the model's, else bfloat16.

    :raises FormatError: on incomplete or malformed NVFP4 tensors, or ones the config excludes.
    """
    config = read_config(ckpt)
    dtype = natural_dtype(ckpt)
    tensors: dict[str, Nvfp4Tensor] = {}
    for key, info in ckpt.tensors.items():
        found = _ct_triple(ckpt, key, info, config) or _modelopt_triple(ckpt, key, info, config)
        if found is None:
            continue
        config.ignored.refuse(
            found.key,
            file=info.file,
            tensor=key,
            stored=f"stored as NVFP4 ({found.producer} layout)",
            format_name=FORMAT,
            config=config.where,
        )
        tensors[found.key] = replace(found, dtype=dtype)
    used = {k for t in tensors.values() for k in t.sources}
    orphans = {k for k in ckpt.tensors if k not in used and _is_global_scale(k, config)}
    return Analysis(tensors, frozenset(used | orphans))


def _ct_triple(
    ckpt: Checkpoint, key: str, info: TensorInfo, config: Nvfp4Config
) -> Nvfp4Tensor | None:
    if not key.endswith(CT_PACKED) or (config.ct_formats and not config.declares_ct_nvfp4):
        return None  # another compressed-tensors format (mxfp4-, pack-quantized, ...)
    base = key.removesuffix(CT_PACKED)
    scale = ckpt.tensors.get(base + CT_SCALE)
    glob = ckpt.tensors.get(base + CT_GLOBAL)
    producer: Producer = "auto-round" if config.auto_round else "compressed-tensors"
    where = f"{info.file}: tensor {key!r} ({FORMAT}, {producer} layout)"
    if glob is None and (scale is None or scale.dtype != SCALE_DTYPE):
        if config.ct_formats == {CT_FORMAT}:
            raise FormatError(
                f"{where}: the config declares only {CT_FORMAT!r}, but there is no "
                f"{SCALE_DTYPE} {base + CT_SCALE!r} and no {base + CT_GLOBAL!r}"
            )
        return None  # MXFP4's pair (E8M0 scale) or INT4 codes: not ours
    return _triple(
        ckpt,
        info,
        producer,
        base + ".weight",
        scale,
        glob,
        base + CT_SCALE,
        base + CT_GLOBAL,
        where,
    )


def _modelopt_triple(
    ckpt: Checkpoint, key: str, info: TensorInfo, config: Nvfp4Config
) -> Nvfp4Tensor | None:
    if not key.endswith(MO_WEIGHT) or info.dtype != PACKED_DTYPE:
        return None  # an F8_E4M3 weight is FP8's; float weights pass through
    base = key.removesuffix(MO_WEIGHT)
    scale = ckpt.tensors.get(base + MO_SCALE)
    glob = ckpt.tensors.get(base + MO_GLOBAL)
    if glob is None and (scale is None or scale.dtype != SCALE_DTYPE):
        return None  # a plain U8 tensor
    where = f"{info.file}: tensor {key!r} ({FORMAT}, modelopt layout)"
    algo = config.modelopt_algo_of(base)
    if algo is not None and algo not in MODELOPT_ALGOS:
        raise FormatError(
            f"{where} looks like NVFP4, but {config.where} gives its module quant_algo "
            f"{algo!r}; this format decodes {sorted(MODELOPT_ALGOS)}"
        )
    return _triple(
        ckpt, info, "modelopt", key, scale, glob, base + MO_SCALE, base + MO_GLOBAL, where
    )


def _triple(
    ckpt: Checkpoint,
    info: TensorInfo,
    producer: Producer,
    logical_key: str,
    scale: TensorInfo | None,
    glob: TensorInfo | None,
    scale_key: str,
    global_key: str,
    where: str,
) -> Nvfp4Tensor:
    """Check one triple's dtypes and shapes; the logical tensor it makes."""
    if info.dtype != PACKED_DTYPE:
        raise FormatError(f"{where} has dtype {info.dtype}; NVFP4 codes are {PACKED_DTYPE}")
    if scale is None:
        raise FormatError(f"{where} has no block scale tensor {scale_key!r}")
    if glob is None:
        raise FormatError(f"{where} has no global scale tensor {global_key!r}")
    if scale.dtype != SCALE_DTYPE:
        raise FormatError(
            f"{where}: its block scale {scale_key!r} in {scale.file} is {scale.dtype}, "
            f"expected {SCALE_DTYPE}"
        )
    if glob.dtype != GLOBAL_DTYPE or math.prod(glob.shape) != 1:
        raise FormatError(
            f"{where}: its global scale {global_key!r} in {glob.file} is {glob.dtype} of shape "
            f"{glob.shape}, expected one {GLOBAL_DTYPE} value"
        )
    if not info.shape:
        raise FormatError(f"{where} is a scalar")
    n = 2 * info.shape[-1]
    want = (*info.shape[:-1], n_blocks(n))
    if scale.shape != want:
        raise FormatError(
            f"{where} has shape {info.shape} ({n} elements per row), its block scale "
            f"{scale_key!r} in {scale.file} has shape {scale.shape}; expected {want}"
        )
    shape = (*info.shape[:-1], n)
    return Nvfp4Tensor(logical_key, producer, info.key, scale_key, global_key, shape, glob.shape)


def _is_global_scale(key: str, config: Nvfp4Config) -> bool:
    """A weight global scale (NVFP4's own names), whoever's module it is in."""
    if key.endswith(CT_GLOBAL):
        return True
    if key.endswith(MO_GLOBAL):
        algo = config.modelopt_algo_of(key.removesuffix(MO_GLOBAL))
        return algo is None or algo in MODELOPT_ALGOS
    return False
