"""Find the FP8 weights of a checkpoint and their scales, from headers and config only.

A logical FP8 weight is an ``F8_E4M3`` tensor ``W`` with exactly one scale
beside it, ``W_scale_inv`` (block scales, DeepSeek / HF naming) or ``W_scale``
(``X.weight_scale``; stacked experts ``gate_up_proj_scale``). The analysis runs
once per :class:`flexq.Checkpoint` and is remembered, because the core asks
per-tensor hooks many times.

Rules (each pinned by a test):
- an F8_E4M3 weight without a scale is an error, never a raw cast;
- an F8_E4M3 tensor whose name says it is a scale (NVFP4's ``weight_scale``)
  is not a weight: another format decodes it;
- a scale-named tensor with no F8 weight is *recognized* so the core reports
  it as an orphan instead of passing it through (the "weights 200x off" bug),
  unless another format's packed weight sits beside it;
- modules the config's ignore lists name (:class:`flexq.formatkit.IgnoreList`)
  are left alone; an F8 weight in one of them is an error;
- ``input_scale``, ``k_scale``, ``v_scale`` are activation / cache scales:
  passed through untouched;
- ModelOpt ``fp8_pb_wo`` (square blocks of a size no config records) takes the one
  edge all the checkpoint's scale grids allow (:mod:`flexq_fp8.square`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from flexq import Checkpoint, FormatError
from flexq.formatkit import Analysis, cached_per_checkpoint, natural_dtype
from flexq_fp8.config import DECODED_ELSEWHERE, FORMAT_NAME, Fp8Config, read_config
from flexq_fp8.layout import Fp8Layout, infer_block, scale_grid
from flexq_fp8.square import square_edge

WEIGHT_DTYPE = "F8_E4M3"
#: Scale dtypes the dequantizer decodes (U8 scales are E8M0 exponents).
SCALE_DTYPES = frozenset({"F32", "F16", "BF16", "U8", "F8_E8M0"})
#: Suffixes that turn a weight key into its scale key, in lookup order.
SCALE_SUFFIXES = ("_scale_inv", "_scale")
#: Float dtypes an unquantized weight may have; a scale beside one is an orphan.
_PLAIN_WEIGHT_DTYPES = frozenset({"BF16", "F16", "F32", WEIGHT_DTYPE})


@cached_per_checkpoint
def analyze(ckpt: Checkpoint) -> Analysis[Fp8Layout]:
    """The FP8 weights of ``ckpt`` (memoized per checkpoint object): logical key
    (= weight key) -> layout, and every FP8 component, used or orphaned.

    :raises FormatError: on an F8 weight without a usable scale.
    """
    config = read_config(ckpt)
    if config.method in DECODED_ELSEWHERE:
        return Analysis({})
    if config.square_algo is not None:
        config = _with_square_block(ckpt, config, config.square_algo)
    dtype = natural_dtype(ckpt)
    layouts: dict[str, Fp8Layout] = {}
    for key, info in ckpt.tensors.items():
        if info.dtype != WEIGHT_DTYPE or is_scale_name(key):
            continue
        where = f"{info.file}: tensor {key!r}"
        config.ignored.refuse(
            key, file=info.file, tensor=key, stored=WEIGHT_DTYPE, format_name=FORMAT_NAME
        )
        layouts[key] = _layout(ckpt, key, config, dtype, where)
    used = {lay.scale_key for lay in layouts.values()}
    packed = _modules_with_packed_weights(ckpt)
    orphans = {
        k for k in ckpt.tensors if k not in used and _is_orphan_scale(ckpt, k, config, packed)
    }
    return Analysis(layouts, frozenset(used | orphans))


def _with_square_block(ckpt: Checkpoint, config: Fp8Config, algo: str) -> Fp8Config:
    """``config`` with the one square block edge every FP8 weight's scale grid allows."""
    grids = []
    for key, info in ckpt.tensors.items():
        scale = ckpt.tensors.get(key + "_scale")
        if info.dtype != WEIGHT_DTYPE or scale is None or len(info.shape) != 2:
            continue
        where = f"{scale.file}: tensor {scale.key!r}"
        grid = scale_grid(info.shape, scale.shape, where)
        if math.prod(grid) > 1:  # a single scale says nothing about the edge
            grids.append(((info.shape[0], info.shape[1]), (grid[0], grid[1]), where))
    if not grids:
        return config
    edge = square_edge(grids, algo)
    return replace(config, candidates=((edge, edge),))


def is_scale_name(key: str) -> bool:
    """True for keys whose last component names a scale (weight_scale, k_scale, scales ...)."""
    return "scale" in key.rsplit(".", 1)[-1]


def _layout(ckpt: Checkpoint, key: str, config: Fp8Config, dtype: str, where: str) -> Fp8Layout:
    info = ckpt.tensors[key]
    scales = [key + s for s in SCALE_SUFFIXES if key + s in ckpt.tensors]
    if not scales:
        raise FormatError(
            f"{where} is {WEIGHT_DTYPE} but has no scale ({key}_scale_inv or {key}_scale); "
            f"raw FP8 is never cast (format {FORMAT_NAME})"
        )
    if len(scales) > 1:
        raise FormatError(
            f"{where} has two scales, {scales[0]!r} and {scales[1]!r} (format {FORMAT_NAME})"
        )
    zero_point = key + "_zero_point"
    if zero_point in ckpt.tensors:
        raise FormatError(
            f"{ckpt.tensors[zero_point].file}: tensor {zero_point!r}: asymmetric FP8 "
            f"(a zero point beside {key!r}) is not a layout any producer publishes "
            f"(format {FORMAT_NAME})"
        )
    sinfo = ckpt.tensors[scales[0]]
    swhere = f"{sinfo.file}: tensor {sinfo.key!r}"
    if sinfo.dtype not in SCALE_DTYPES:
        raise FormatError(
            f"{swhere}: scale of {key!r} has dtype {sinfo.dtype}; FP8 scales are "
            f"{', '.join(sorted(SCALE_DTYPES))} (format {FORMAT_NAME})"
        )
    block = infer_block(info.shape, sinfo.shape, config.candidates, swhere)
    return Fp8Layout(key, sinfo.key, sinfo.dtype, info.shape, block, sinfo.shape, dtype)


def _modules_with_packed_weights(ckpt: Checkpoint) -> set[str]:
    """Modules holding another format's weight (``weight_packed``, ``weight_blocks`` ...)."""
    found = set()
    for k in ckpt.tensors:
        module, _, last = k.rpartition(".")
        if last.startswith("weight") and last != "weight" and not is_scale_name(k):
            found.add(module)
    return found


def _is_orphan_scale(ckpt: Checkpoint, key: str, config: Fp8Config, packed: set[str]) -> bool:
    """A scale-named tensor that no FP8 weight uses and no other format's weight explains."""
    base = _weight_of(key)
    if base is None or config.ignored.match(base) is not None:
        return False
    sibling = ckpt.tensors.get(base)
    if sibling is not None:
        return sibling.dtype in _PLAIN_WEIGHT_DTYPES
    if key.endswith("_scale_inv"):
        return True  # only FP8 block scales carry this name
    # `X.weight_scale` also names MXFP4 / NVFP4 scales in compressed-tensors
    # (beside `X.weight_packed`); those belong to other formats.
    return base.rpartition(".")[0] not in packed


def _weight_of(scale_key: str) -> str | None:
    """``X.weight`` for ``X.weight_scale[_inv]``, ``P`` for ``P_scale_inv``; None otherwise."""
    if scale_key.endswith("_scale_inv"):
        return scale_key.removesuffix("_scale_inv")
    if scale_key.endswith(".weight_scale"):
        return scale_key.removesuffix("_scale")
    return None
