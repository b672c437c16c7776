"""Map target shards to boxes of logical tensors with Paddle 3.3.1's own AOAEngine.

For :func:`flexq.load_state_dict`. AOA statements (rename, ``^T``,
``fused_qkv``, ``fused_ffn``, ``dtype=``, temporary variables, macros) run over
the *logical* tensors of the composed checkpoint, for every kind of target
(3.3.1 itself only applies AOA when every target is a ShardedWeight). Every
mapping is validated here, before any data is read or any target written.
"""

from __future__ import annotations

import contextlib
import io
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from flexq.errors import FlexqError, TargetError

if TYPE_CHECKING:
    from flexq.compose import ComposedTransform
    from flexq.targets import Target

FLOAT_DTYPES = ("float32", "bfloat16", "float16")
#: unquantized checkpoint dtypes cast implicitly to a FLOAT_DTYPES target.
PASSTHROUGH_FLOATS = ("float64", *FLOAT_DTYPES)
#: dtype given to every AOA variable so that AOA's own dtype assertion stays
#: quiet; flexq checks dtypes itself (a quantized tensor dequantizes to any float).
_NEUTRAL = "float32"


@dataclass(frozen=True)
class Piece:
    """One box of a logical tensor that lands in one box of one target."""

    target: Target
    logical_key: str
    src_desc: Any  # ShardedWeightDesc of the logical box
    dst_desc: Any  # ShardedWeightDesc of the target box (global coordinates)
    transposes: tuple[str, ...]

    @property
    def nbytes(self) -> int:
        """Float32 bytes of the dequantized box (what one piece holds in flight)."""
        return 4 * math.prod(int(d) for d in self.src_desc.local_shape)

    @property
    def axes(self) -> list[int]:
        """For each axis of the target box, the axis of the logical box it comes from."""
        order = list(range(len(self.src_desc.local_shape)))
        for perm in self.transposes:
            order = [order[int(i)] for i in perm.strip("[]").split(",")]
        return order

    def split(self, max_bytes: int) -> list[Piece]:
        """This piece cut along its first logical axis into pieces of at most
        ``max_bytes`` float32 bytes each (one row at least), so one huge tensor
        never has to be in flight whole. Cuts fall on multiples of ``ROW_ALIGN``
        rows where they can, so block formats re-read few scale blocks."""
        shape = tuple(int(d) for d in self.src_desc.local_shape)
        if not shape or self.nbytes <= max_bytes:
            return [self]
        row_bytes = self.nbytes // shape[0] if shape[0] else self.nbytes
        rows = max(1, max_bytes // max(1, row_bytes))
        if rows >= ROW_ALIGN:
            rows -= rows % ROW_ALIGN
        dst_axis = self.axes.index(0)
        out = []
        for start in range(0, shape[0], rows):
            n = min(rows, shape[0] - start)
            out.append(
                replace(
                    self,
                    src_desc=_cut(self.src_desc, 0, start, n),
                    dst_desc=_cut(self.dst_desc, dst_axis, start, n),
                )
            )
        return out


#: Chunk boundaries of split pieces fall on multiples of this many rows when possible.
ROW_ALIGN = 128


def _cut(desc: Any, axis: int, start: int, size: int) -> Any:
    """``desc`` narrowed to ``size`` elements from ``start`` (relative) along ``axis``."""
    offset = list(desc.global_offset)
    shape = list(desc.local_shape)
    offset[axis] += start
    shape[axis] = size
    return replace(desc, global_offset=tuple(offset), local_shape=tuple(shape))


def map_targets(
    ct: ComposedTransform, targets: list[Target], aoa_config: dict[str, Any] | None
) -> list[Piece]:
    """Every (logical box -> target box) piece of the load, validated."""
    from paddle.distributed.flex_checkpoint.aoa.aoa_engine import AOAEngine
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeightDesc

    source = {
        k: [ShardedWeightDesc(k, e.shape, e.shape, (0,) * len(e.shape), _NEUTRAL)]
        for k, e in ct.entries.items()
    }
    dest = {t.key: [replace(t.desc(), dtype=_NEUTRAL)] for t in targets}
    config = dict(aoa_config or {})
    config.setdefault("aoa_statements", [])
    try:
        # AOA prints its own traceback block to stdout on a bad statement; flexq's
        # error below says the same in one line.
        with contextlib.redirect_stdout(io.StringIO()):
            engine = AOAEngine(config, source, dest)
    except KeyError as exc:
        missing = exc.args[0] if exc.args else None
        if missing in dest:
            raise TargetError(
                f"target {missing!r}: no tensor of that name in {ct.checkpoint.path} (after AOA)"
            ) from None
        raise TargetError(
            f"AOA statements {config['aoa_statements']} name {missing!r}, which is neither a "
            f"logical tensor of {ct.checkpoint.path} nor a target"
        ) from None
    except Exception as exc:
        raise TargetError(
            f"AOA statements {config['aoa_statements']} do not apply to the logical tensors "
            f"of {ct.checkpoint.path}: {type(exc).__name__}: {exc}"
        ) from None
    pieces: list[Piece] = []
    for t in targets:
        pieces.extend(_pieces_of(ct, engine, t))
    return pieces


def _pieces_of(ct: ComposedTransform, engine: Any, t: Target) -> list[Piece]:
    where = f"target {t.key!r}"
    var = engine.output_vars.get(t.key)
    if var is None:
        raise TargetError(f"{where}: no tensor of that name in {ct.checkpoint.path} (after AOA)")
    if tuple(var.shape) != t.global_shape:
        built = sorted({s[0] for s in var.slices})
        owners = sorted({ct.entries[k].owner or "passthrough" for k in built if k in ct.entries})
        raise TargetError(
            f"{where}: shape {list(t.global_shape)} does not match {list(var.shape)} "
            f"built from {built} (format {', '.join(owners)}) in {ct.checkpoint.path}"
        )
    try:
        mappings = engine.find_shard_sources(replace(t.desc(), dtype=_NEUTRAL))
    except Exception as exc:
        raise TargetError(f"{where}: AOA failed: {type(exc).__name__}: {exc}") from None
    covered = sum(math.prod(m.target_slice.local_shape) for m in mappings)
    if covered != math.prod(t.local_shape):
        raise TargetError(f"{where}: AOA fills {covered} of {math.prod(t.local_shape)} elements")
    out = []
    for m in mappings:
        key = m.source_slice.key
        entry = ct.entry(key)
        post = tuple(m.postprocess_list or ())
        casts = [p for p in post if not p.startswith("[")]
        what = f"{where} from {key!r} ({entry.owner or 'passthrough'}, {ct.checkpoint.path})"
        if casts and casts[-1] != t.dtype:
            raise TargetError(f"{what}: AOA casts to {casts[-1]} but the target is {t.dtype}")
        if entry.owner is None and not casts and entry.dtype != t.dtype:
            _check_passthrough_cast(what, entry.dtype, t.dtype)
        if entry.owner is not None and t.dtype not in FLOAT_DTYPES:
            raise TargetError(f"{what}: a quantized tensor cannot be loaded into {t.dtype}")
        transposes = tuple(p for p in post if p.startswith("["))
        src = replace(m.source_slice, dtype=t.dtype)
        dst = replace(m.target_slice, dtype=t.dtype)
        out.append(Piece(t, key, src, dst, transposes))
    return out


def _check_passthrough_cast(what: str, source: str, target: str) -> None:
    """Refuse a cast of an unquantized tensor that is not a float-to-float rounding.

    Floats are cast to the target's float dtype (exact widening, one rounding
    when narrowing); integers never silently become floats (they may be
    quantized codes) nor change width, and no float becomes an integer. An
    explicit AOA ``dtype=`` cast is the caller's choice and is not checked here.
    """
    if source in PASSTHROUGH_FLOATS and target in FLOAT_DTYPES:
        if (source, target) != ("float64", "bfloat16"):
            return
        raise TargetError(
            f"{what}: float64 into bfloat16 would round twice; load it into a "
            "float32 target, or cast it with dtype='bfloat16' in the AOA statement"
        )
    kind = "an integer" if source not in PASSTHROUGH_FLOATS else "a float"
    raise TargetError(
        f"{what}: checkpoint dtype {source} differs from target dtype {target}, and "
        f"{kind} tensor is not cast to {target} implicitly (integer tensors may be "
        f"quantized data: is the format that decodes it installed?); to cast it "
        f"anyway, add dtype='{target}' to its AOA statement"
    )


def check_shapes(pieces: list[Piece]) -> None:
    """Raise FlexqError when a piece's transposed box does not fit its target box."""
    for p in pieces:
        shape = [p.src_desc.local_shape[a] for a in p.axes]
        if tuple(shape) != tuple(p.dst_desc.local_shape):
            raise FlexqError(
                f"target {p.target.key!r}: box {p.src_desc.local_shape} of {p.logical_key!r} "
                f"does not fit {p.dst_desc.local_shape}"
            )
