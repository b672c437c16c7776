"""Which kept form a logical tensor can be loaded in, and where that form's bytes live.

For :mod:`flexq.load.kept` (and ``flexq inspect``): from a logical tensor's
owner and its sources' dtypes and shapes (no tensor data read), the kept form
with the quantization axis last, in the units a kept target holds:

- ``fp8``: values F8_E4M3 ``[..., N, K]`` as stored; a per-tensor, per-channel
  or block scale grid (F32, BF16, F16, or E8M0 as U8/F8_E8M0);
- ``mxfp4``: values uint8 ``[..., N, K/2]`` (two E2M1 codes a byte, low nibble
  first; gpt-oss ``P_blocks [..., N, G, 16]`` merged to ``[..., N, G*16]``, the
  checkpoint's own bytes, whatever the logical layout); scales E8M0 ``[..., N, K/32]``;
- ``nvfp4``: values uint8 ``[..., N, K/2]``; scales F8_E4M3 ``[..., N, K/16]``; one
  float32 global scale.

Blocks are counted in kept units (bytes for FP4 values: 32 elements = 16 bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from flexq.errors import TargetError
from flexq.numerics.elements import E4M3_TO_FLOAT32
from flexq.plan import ceil_div

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.io.checkpoint import Checkpoint

Kind = Literal["fp8", "mxfp4", "nvfp4"]

#: FP8 scale dtypes a kept target can take exactly (E8M0 as U8 or F8_E8M0 bytes).
FP8_SCALES = ("F32", "BF16", "F16", "U8", "F8_E8M0")
E8M0 = ("U8", "F8_E8M0")

#: Target scale dtypes each kind accepts (the first is the form's own).
SCALE_TARGETS: dict[Kind, tuple[str, ...]] = {
    "fp8": ("float32", "uint8"),
    "mxfp4": ("uint8", "float32"),
    "nvfp4": ("float8_e4m3fn", "float32"),
}
VALUE_TARGETS: dict[Kind, str] = {"fp8": "float8_e4m3fn", "mxfp4": "uint8", "nvfp4": "uint8"}

#: The kept NVFP4 form's one dequantization rule (ModelOpt's, and the kernels' alpha):
#: W = e2m1(values) * (float32(scales) * global_scale), in float32.
NVFP4_RULE = "W = e2m1(values) * (float32(scales) * global_scale)"


@dataclass(frozen=True)
class KeptForm:
    """One logical tensor's kept form, as the checkpoint stores it.

    :ivar shape: the kept values' shape (elements for FP8, bytes for FP4).
    :ivar grid: the stored scale's shape (``[]``/``[1]`` per tensor).
    :ivar block: the checkpoint's block over ``shape`` (leading dims 1); ``shape`` itself
        for a per-tensor scale.
    :ivar gpt_oss: values stored as ``[..., N, G, 16]`` blocks (merged on read).
    :ivar global_key: NVFP4's global scale tensor; ``divides``: the producer divides by it
        (compressed-tensors) rather than multiplying (ModelOpt).
    """

    kind: Kind
    key: str
    owner: str
    values_key: str
    scale_key: str
    shape: tuple[int, ...]
    grid: tuple[int, ...]
    block: tuple[int, ...]
    per_tensor: bool = False
    gpt_oss: bool = False
    f4: bool = False
    global_key: str | None = None
    divides: bool = False

    def read_values(
        self, ckpt: Checkpoint, offset: tuple[int, ...], shape: tuple[int, ...]
    ) -> np.ndarray:
        """The kept values box ``offset`` + ``shape``, read as the checkpoint's own bytes."""
        if self.gpt_oss:
            # Kept boxes are block-aligned along the last axis (checked before any read).
            lead_off, lead = offset[:-1], shape[:-1]
            first, count = offset[-1] // 16, ceil_div(shape[-1], 16)
            per = 32 if self.f4 else 16
            raw = ckpt.read(self.values_key, (*lead_off, first, 0), (*lead, count, per))
            return raw.reshape(shape)
        if self.f4:  # F4 headers count elements, two a byte
            offset, shape = (*offset[:-1], 2 * offset[-1]), (*shape[:-1], 2 * shape[-1])
        return ckpt.read(self.values_key, offset, shape).reshape(
            (*shape[:-1], shape[-1] // (2 if self.f4 else 1))
        )


def scale_grid(shape: tuple[int, ...], block: tuple[int, ...]) -> tuple[int, ...]:
    """The scale grid of ``block`` over ``shape`` (a partial last block counts)."""
    return tuple(ceil_div(s, b) for s, b in zip(shape, block, strict=True))


def grid_box(
    offset: tuple[int, ...], shape: tuple[int, ...], block: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The offset and shape, in the scale grid of ``block``, of the blocks covering the box."""
    start = tuple(o // b for o, b in zip(offset, block, strict=True))
    end = tuple(ceil_div(o + n, b) for o, n, b in zip(offset, shape, block, strict=True))
    return start, tuple(e - s for s, e in zip(start, end, strict=True))


def form_of(ct: Composition, key: str) -> KeptForm:
    """The kept form of logical tensor ``key``, or a TargetError saying why it has none."""
    if key not in ct.entries:
        raise TargetError(f"kept target {key!r}: the checkpoint has no logical tensor of that name")
    entry = ct.entries[key]
    tensors = ct.checkpoint.tensors
    srcs = entry.sources
    dts = [tensors[s].dtype for s in srcs]
    shapes = [tuple(tensors[s].shape) for s in srcs]
    if len(srcs) == 2 and dts[0] == "F8_E4M3" and dts[1] in FP8_SCALES:
        return _fp8(ct, key, entry.owner, srcs, shapes)
    if entry.owner == "mxfp4" and len(srcs) == 2 and dts[0] in ("U8", "F4") and dts[1] in E8M0:
        return _mxfp4(key, entry.owner, srcs, shapes, dts[0] == "F4")
    if entry.owner == "nvfp4" and len(srcs) == 3 and dts == ["U8", "F8_E4M3", "F32"]:
        return _nvfp4(ct, key, entry.owner, srcs, shapes)
    raise TargetError(
        f"kept target {key!r}: the checkpoint stores it as {dts} (format {entry.owner}); "
        "kept forms exist for an F8_E4M3 weight with an F32/BF16/F16/E8M0 scale (FP8), and "
        "for MXFP4 and NVFP4 weights: load this tensor into an ordinary (dequantized) target"
    )


def _fp8(
    ct: Composition,
    key: str,
    owner: str,
    srcs: tuple[str, ...],
    shapes: list[tuple[int, ...]],
) -> KeptForm:
    shape, grid = shapes
    lead = (1,) * (len(shape) - 2)
    if math.prod(grid) == 1:
        return KeptForm("fp8", key, owner, srcs[0], srcs[1], shape, grid, shape, per_tensor=True)
    if grid in (shape[:-1], (*shape[:-1], 1)):
        return KeptForm("fp8", key, owner, srcs[0], srcs[1], shape, grid, (*lead, 1, shape[-1]))
    declared = ct.checkpoint.quantization_config.get("weight_block_size")
    if isinstance(declared, list) and len(declared) == 2:
        block = (*lead, int(declared[0]), int(declared[1]))
        if scale_grid(shape, block) == grid:
            return KeptForm("fp8", key, owner, srcs[0], srcs[1], shape, grid, block)
    raise TargetError(
        f"kept target {key!r}: scale {srcs[1]!r} {list(grid)} is no per-tensor, "
        "per-channel or declared block grid over the weight; it cannot be kept exactly"
    )


def _fp4_block(
    key: str,
    kind: str,
    srcs: tuple[str, ...],
    shape: tuple[int, ...],
    grid: tuple[int, ...],
    nbytes: int,
) -> tuple[int, ...]:
    """The block of ``nbytes`` along the last axis of kept FP4 values ``shape``, when the
    stored scale grid is exactly that block's."""
    block = (*(1,) * (len(shape) - 1), nbytes)
    if len(shape) < 2 or scale_grid(shape, block) != grid:
        raise TargetError(
            f"kept target {key!r}: {kind} scales {srcs[1]!r} {list(grid)} do not cover the "
            f"packed values {srcs[0]!r} (kept {list(shape)}) in blocks of {2 * nbytes}; "
            "it cannot be kept"
        )
    return block


def _mxfp4(
    key: str, owner: str, srcs: tuple[str, ...], shapes: list[tuple[int, ...]], f4: bool
) -> KeptForm:
    packed, grid = shapes
    gpt_oss = len(packed) == len(grid) + 1
    if gpt_oss:
        shape = (*packed[:-2], packed[-2] * (packed[-1] // (2 if f4 else 1)))
    else:
        shape = (*packed[:-1], packed[-1] // (2 if f4 else 1))
    block = _fp4_block(key, "MXFP4", srcs, shape, grid, 16)
    return KeptForm(
        "mxfp4", key, owner, srcs[0], srcs[1], shape, grid, block, gpt_oss=gpt_oss, f4=f4
    )


def _nvfp4(
    ct: Composition,
    key: str,
    owner: str,
    srcs: tuple[str, ...],
    shapes: list[tuple[int, ...]],
) -> KeptForm:
    shape, grid, _ = shapes
    block = _fp4_block(key, "NVFP4", srcs, shape, grid, 8)
    if srcs[2].endswith("_scale_2"):
        divides = False  # ModelOpt: W = e2m1 * (scale * weight_scale_2), the kept rule itself
    elif ct.checkpoint.quantization_config.get("quant_method") == "auto-round":
        raise TargetError(
            f"kept target {key!r}: auto-round NVFP4 computes W = (e2m1 * (1 / global)) * scale, "
            f"which the kept rule {NVFP4_RULE} cannot reproduce bit for bit; "
            "load it into an ordinary (dequantized) target"
        )
    else:
        divides = True  # compressed-tensors: W = e2m1 * (scale / global)
    return KeptForm(
        "nvfp4",
        key,
        owner,
        srcs[0],
        srcs[1],
        shape,
        grid,
        block,
        global_key=srcs[2],
        divides=divides,
    )


def reciprocal_global(key: str, global_key: str, g: np.float32, codes: np.ndarray) -> np.float32:
    """compressed-tensors' divisor ``g`` as the kept rule's multiplier ``1 / g``, when that
    is exact: ``s / g == s * (1 / g)`` in float32 for every finite E4M3 scale ``s`` among
    ``codes`` (the scale bytes of the kept shard)."""
    s = E4M3_TO_FLOAT32[np.unique(codes)]
    s = s[np.isfinite(s)]
    r = np.float32(1.0) / g if g != 0 else np.float32(np.inf)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        exact = g != 0 and np.isfinite(r) and np.array_equal(s / g, s * r)
    if not exact:
        raise TargetError(
            f"kept target {key!r}: compressed-tensors divides by its global scale "
            f"{global_key!r} ({float(g)!r}); its reciprocal is not exact in float32 under the "
            f"kept rule {NVFP4_RULE}: load this tensor into an ordinary (dequantized) target"
        )
    return r
