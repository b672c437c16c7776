"""The NVFP4 dequantization math, in the producers' own float32 operation order.

Each block of 16 E2M1 elements has an E4M3 scale ``s`` (exact in float32) and the
tensor has one float32 global scale ``g``. Each producer's dequantizer rounds its
two float32 products (or quotients) in its own order, and bit-exactness depends on it:

- compressed-tensors 0.19.0 (``NVFP4PackedCompressor.decompress`` ->
  ``_dequantize``): ``e = s / g`` (a float32 division: the bf16-cast scale meets
  the float32 ``[1]`` global scale and promotes), ``W = e2m1 * e``, then its cast
  to the model dtype;
- ModelOpt (``NVFP4QTensor.dequantize``): ``e = s * g`` in float32, ``W = e2m1 * e``;
  its code table has +0.0 for code 8 (compressed-tensors' gives -0.0), kept here;
- auto-round 0.15.1's own format (``NVFP4QuantLinear._dequant_nvfp4_tensor``):
  ``r = 1 / g`` (0 when g is 0), ``W = (e2m1 * r) * s``, each product rounded to
  float32: here a per-tensor element table ``e2m1 * r`` times the block scale.

So a zero global scale makes compressed-tensors blocks +-inf (NaN for zero codes
and zero scales) and auto-round blocks 0; E4M3 NaN codes (0x7F / 0xFF) make their
block NaN. Products beyond float32's range are infinity. Numpy and Paddle paths
run the same operations and give bit-identical results.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexq.formatkit import (
    E2M1_PAIRS,
    E2M1_VALUES,
    E4M3_TO_FLOAT32,
    BoxSources,
    check_scales,
    is_paddle,
    lookup_blocks,
    nibble_block_boxes,
    nibble_pairs,
    ops_for,
    pair_items,
    to_numpy,
)
from flexq_nvfp4.config import FORMAT
from flexq_nvfp4.layout import BLOCK, Nvfp4Tensor, Producer

#: ModelOpt's own E2M1 table: code 8 is +0.0 (the kit's, compressed-tensors', is -0.0).
E2M1_VALUES_MODELOPT = np.where(np.arange(16) == 8, np.float32(0.0), E2M1_VALUES).astype(np.float32)


#: producer -> byte -> (element 2b from the low nibble, element 2b+1 from the high nibble).
PAIRS: dict[str, np.ndarray] = {
    "compressed-tensors": E2M1_PAIRS,
    "modelopt": nibble_pairs(E2M1_VALUES_MODELOPT),
}


def _quad_table(pairs: np.ndarray) -> np.ndarray:
    """Two code bytes (read as one native uint16) -> their four float32 values, as one
    16-byte (complex128) item: a 1 MiB table that halves the lookups of the banded path."""
    both = np.arange(1 << 16)
    first, second = (both & 0xFF, both >> 8) if np.little_endian else (both >> 8, both & 0xFF)
    quad = np.concatenate([pairs[first], pairs[second]], axis=1).astype(np.float32)
    return np.ascontiguousarray(quad).view(np.complex128).reshape(1 << 16)


#: Quad tables of the fixed element tables, built on first use.
_QUADS: dict[str, np.ndarray] = {}
#: Code bytes from which a per-tensor quad table (~6 ms to build) pays for itself.
_QUAD_MIN_BYTES = 1 << 22


def _quads(pairs: np.ndarray, nbytes: int) -> np.ndarray | None:
    """The quad table for ``pairs``, or None where building one costs more than it saves."""
    for name, table in PAIRS.items():
        if pairs is table:
            if name not in _QUADS:
                _QUADS[name] = _quad_table(table)
            return _QUADS[name]
    # auto-round: a table per tensor, worth it for large tensors only
    return _quad_table(pairs) if nbytes >= _QUAD_MIN_BYTES else None


def element_pairs(producer: Producer, global_scale: Any) -> np.ndarray:
    """The [256, 2] float32 table taking a code byte to its two elements (before the block scale).

    compressed-tensors and ModelOpt elements are plain E2M1 values; auto-round's are
    ``float32(e2m1 * r)`` with ``r = float32(1 / g)``, or 0 for a zero ``g``.
    """
    if producer != "auto-round":
        return PAIRS[producer]
    g = _scalar(global_scale.numpy() if is_paddle(global_scale) else global_scale)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        r = np.float32(0.0) if g == 0 else np.float32(1.0) / g
        return nibble_pairs(E2M1_VALUES * r)


def effective_scales(producer: Producer, scales: Any, global_scale: Any) -> Any:
    """The float32 scale each block's elements are multiplied by.

    ``s / g`` (compressed-tensors), ``s * g`` (ModelOpt), ``s`` (auto-round, whose
    global scale is in its element table).

    :param scales: E4M3 bytes ``[..., blocks]`` (numpy uint8 or a Paddle uint8 tensor).
    :param global_scale: the one-element float32 global scale, any shape.
    """
    ops = ops_for(scales)
    s = ops.lut(E4M3_TO_FLOAT32, scales)
    if producer == "auto-round":
        return s
    g = global_scale.reshape([]) if is_paddle(global_scale) else _scalar(global_scale)
    if is_paddle(s):
        return s / g if producer == "compressed-tensors" else s * g
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        out: np.ndarray = s / g if producer == "compressed-tensors" else s * g
    return out


_E4M3_MAX = float(np.nanmax(np.abs(E4M3_TO_FLOAT32)))
_FLOAT32_MAX = float(np.finfo(np.float32).max)

#: How each dividing producer applies its global scale, for messages.
_DEFINITION = {
    "compressed-tensors": "W = e2m1 * (scale / global)",
    "auto-round": "W = (e2m1 * (1 / global)) * scale",
}


def divides(producer: Producer) -> bool:
    """Whether the producer's definition divides by the global scale (compressed-tensors'
    ``s / g``, auto-round's ``1 / g``) rather than multiplying by it (ModelOpt)."""
    return producer != "modelopt"


def check(t: Nvfp4Tensor, sources: BoxSources) -> None:
    """The plan's check, run by the core before the first write (after its own check of
    the declared scales): what multiplies each block's elements must be finite.

    A global scale the definition divides by is checked here, so the message says what
    it does: NaN makes the tensor non-finite, infinity makes it zero, and zero makes
    compressed-tensors' blocks non-finite (auto-round's reciprocal of 0 is 0 by its
    ``get_reciprocal``: zeros, no warning). ModelOpt multiplies by its global scale,
    which the core checks as a scale. Otherwise a non-finite effective scale comes from
    a product of finite scales beyond float32, reported on the block scale with the
    global scale named.
    """
    glob = to_numpy(sources[t.global_key])
    g = _scalar(glob)
    ckpt = sources.checkpoint
    if divides(t.producer):
        zero = t.producer == "compressed-tensors" and g == 0
        if not np.isfinite(g) or zero:
            made = "zero" if np.isinf(g) else "non-finite"
            check_scales(
                glob,
                scale=ckpt.info(t.global_key),
                logical_key=t.key,
                format_name=FORMAT,
                bad=np.full(np.shape(glob), True),
                why=f"divides every block scale ({_DEFINITION[t.producer]}), making "
                f"{t.key!r} {made}",
            )
            return
    if not np.isfinite(g) or (t.producer == "auto-round" and g == 0):
        return  # ModelOpt's: the core reported it; auto-round's 1 / 0 is 0 by definition
    # Finite block scales are at most 448 (NaN codes the core reported): the effective
    # scale can leave float32 only for an extreme global scale, which one bound tells
    # without a pass over the scales.
    top = _E4M3_MAX / abs(float(g)) if divides(t.producer) else _E4M3_MAX * abs(float(g))
    if top < _FLOAT32_MAX:
        return
    # The scale box is small (1/16 of the codes): checked on the host.
    stored = to_numpy(sources[t.scale_key])
    effective = effective_scales(t.producer, stored, glob)
    # Byte 0x02 holds code 2 (1.0): its entry is the table's factor (1 but for auto-round).
    r = element_pairs(t.producer, glob)[2, 0]
    with np.errstate(over="ignore", invalid="ignore"):
        effective = effective * r
    check_scales(
        effective,
        scale=ckpt.info(t.scale_key),
        logical_key=t.key,
        format_name=FORMAT,
        offset=sources.offset(t.scale_key),
        # A NaN scale code the core reported already; only finite products of finite
        # scales that left float32 are new here.
        bad=~np.isfinite(effective) & np.isfinite(E4M3_TO_FLOAT32[stored]),
        why=f"(effective, with global scale {t.global_key!r} = {float(g)}) is beyond "
        f"float32 and makes {t.key!r} non-finite",
    )


def _scalar(x: Any) -> np.float32:
    return np.float32(np.asarray(x, dtype=np.float32).reshape(()))


def decode(t: Nvfp4Tensor, sources: BoxSources, out: Any) -> Any:
    """The format's ``decode``: checks the sources' shapes against the target, then
    :func:`dequantize` (the core checked the scales first: the plan declares both and
    :func:`check` what their combination reveals).

    :raises FormatError: naming the tensor when a source arrived in another shape.
    """
    target = sources.target
    (_, codes_shape), (_, scales_shape), trim = nibble_block_boxes(target, BLOCK, t.n)
    want = {t.packed_key: codes_shape, t.scale_key: scales_shape, t.global_key: t.global_shape}
    sources.expect(want, logical_key=t.key, format_name=FORMAT)
    packed, scales, glob = (sources[k] for k in t.sources)
    pairs = element_pairs(t.producer, glob)
    scale = effective_scales(t.producer, scales, glob)
    size = target.local_shape[-1]
    return dequantize(pairs, packed, scale, trim, size, out, sources.rounded_out)


def dequantize(
    pairs: np.ndarray,
    packed: Any,
    scale: Any,
    trim: int,
    size: int,
    out: Any = None,
    rounded: np.ndarray | None = None,
) -> Any:
    """Decode a run of whole blocks along the last axis and cut out ``size`` elements.

    :param pairs: the tensor's element table, [256, 2] float32 (:func:`element_pairs`).
    :param packed: codes as bytes, ``[..., nbytes]``; the run starts on a block
        boundary and holds whole blocks except possibly a partial last one.
    :param scale: the blocks' float32 effective scales (:func:`effective_scales`),
        ``[..., ceil(2*nbytes / 16)]``.
    :param trim: elements of the first block to drop (the target's offset in it).
    :param size: elements to keep.
    :param out: None, or a C-contiguous numpy float32 array ``[..., size]`` to fill
        (used when the run is exactly the wanted whole blocks).
    :param rounded: None, or a C-contiguous uint16 array ``[..., size]`` (a bfloat16
        target's memory, ``BoxSources.rounded_out``) that takes the bfloat16 bits instead
        when the run is exactly the wanted whole blocks.
    :return: float32 ``[..., size]``, numpy or Paddle like the inputs, or ``rounded``.
    """
    lead = tuple(packed.shape[:-1])
    n = 2 * int(packed.shape[-1])
    nblk = int(scale.shape[-1])
    if 0 in (*lead, n, size):
        empty = np.zeros((*lead, size), np.float32)
        return empty if isinstance(packed, np.ndarray) else _paddle_zeros(packed, empty)
    if isinstance(packed, np.ndarray):
        if packed.flags.c_contiguous and n == nblk * BLOCK and trim == 0 and size == n:
            return _whole_blocks(pairs, packed, scale, out, rounded)
        values = pair_items(pairs)[packed].view(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            if n == nblk * BLOCK:
                blocks = values.reshape((*lead, nblk, BLOCK))
                blocks *= np.asarray(scale, dtype=np.float32)[..., None]
            else:
                values *= np.repeat(scale, BLOCK, axis=-1)[..., :n]
        return values[..., trim : trim + size]
    return _paddle(pairs, packed, scale, lead, n, nblk)[..., trim : trim + size]


def _paddle_zeros(like: Any, empty: np.ndarray) -> Any:
    import paddle

    return paddle.to_tensor(empty, place=like.place)


def _paddle(
    pairs: np.ndarray, packed: Any, scale: Any, lead: tuple[int, ...], n: int, nblk: int
) -> Any:
    """The device path: the same lookups and float32 products as Paddle ops."""
    import paddle

    table = paddle.to_tensor(pairs, place=packed.place)
    values = paddle.gather(table, packed.astype("int64").reshape([-1]), axis=0)
    if n == nblk * BLOCK:
        blocks = values.reshape([*lead, nblk, BLOCK]) * scale.reshape([*lead, nblk, 1])
        return blocks.reshape([*lead, n])
    spread = paddle.repeat_interleave(scale, BLOCK, axis=-1)[..., :n]
    return values.reshape([*lead, n]) * spread


def _whole_blocks(
    pairs: np.ndarray,
    packed: np.ndarray,
    scale: np.ndarray,
    out: np.ndarray | None,
    rounded: np.ndarray | None = None,
) -> np.ndarray:
    """The numpy path for runs of whole blocks: band by band on the worker threads.

    Each block's 8 code bytes are viewed as 4 uint16 and its 16 results as 4 items
    of 16 bytes, so a lookup writes four elements (or, without a quad table, as 8
    bytes and 8 items of 8 bytes), and each block's scale lines up with its items;
    a band is looked up (``take`` with ``clip`` skips bounds checks: a code cannot
    exceed the table) and scaled while it is still in cache (with ``rounded``, rounded
    into it there, its bfloat16 bits viewed as items of as many values).
    """
    lead, nblk = tuple(packed.shape[:-1]), int(scale.shape[-1])
    codes = packed.reshape((*lead, nblk, BLOCK // 2))
    side = np.ascontiguousarray(scale, dtype=np.float32).reshape((*lead, nblk, 1))
    quad = _quads(pairs, packed.size)
    if quad is None:
        return lookup_blocks(pair_items(pairs), codes, side, out, rounded)
    return lookup_blocks(quad, codes.view(np.uint16), side, out, rounded)
