"""Map target shards to boxes of logical tensors with Paddle 3.3.1's own AOAEngine.

For the load engine. AOA statements (rename, ``^T``, ``fused_qkv``,
``fused_ffn``, ``dtype=``, temporary variables, macros) run over the *logical*
tensors of the composed checkpoint, for every kind of target (3.3.1 itself only
applies AOA when every target is a ShardedWeight). Every mapping is validated
here, before any data is read or any target written: a statement that expands
to nothing or names no tensor is an error quoting that statement, and each
piece's dtypes are checked (a float passthrough tensor is cast to its target's
float dtype; integers never silently become floats).

AOA's fuse macros (``fused_ffn``, ``fused_qkv_old``) lay a fused tensor out by the
number of shards its target has over all ranks: with two tensor-parallel shards,
``gate, up -> up_gate_proj, fused_ffn`` puts each rank's chunk of gate before its
chunk of up. Paddle's own load shows AOA every rank's boxes (gathered); flexq shows
it every rank's boxes as the local one implies them, without asking the other
ranks (a rank's cost does not grow with the world): an even tiling of the global
shape by the local box, which is what tensor- and expert-parallel layouts are. A
fuse whose layout depends on a target's shards when the local box does not tile
its tensor evenly is an error, never a plain concatenation.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from flexq.errors import TargetError
from flexq.io.dtypes import FLOAT_DTYPES
from flexq.plan import TargetSlice

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.load.report import LoadOptions
    from flexq.load.targets import Target
    from flexq.plan import ReadPlan
#: dtype given to every AOA variable so that AOA's own dtype assertion stays
#: quiet; flexq checks dtypes itself (a quantized tensor dequantizes to any float).
_NEUTRAL = "float32"


@dataclass(frozen=True)
class Piece:
    """One box of a logical tensor that lands in one box of one target, with its plan."""

    target: Target
    logical_key: str
    src_desc: Any  # ShardedWeightDesc of the logical box
    dst_desc: Any  # ShardedWeightDesc of the target box (global coordinates)
    transposes: tuple[str, ...]
    #: the format that owns the logical tensor.
    owner: str
    #: the owner's read plan for the logical box.
    plan: ReadPlan
    #: on the smallest piece of each format (passthrough aside), what the check before
    #: the first write decodes: the owner's plan for the box's first rows (at most
    #: :data:`PROBE_BYTES` of float32, boxes inside ``plan``'s), or ``plan`` itself.
    probe: ReadPlan | None
    #: (target key, checkpoint dtype, target dtype) when a plain tensor is cast.
    cast: tuple[str, str, str] | None = None

    @property
    def box(self) -> TargetSlice:
        """The box of the logical tensor ``plan`` was made for, in the target's dtype."""
        return _logical_box(self.src_desc, self.target.dtype)

    @property
    def nbytes(self) -> int:
        """Float32 bytes of the dequantized box (what one piece holds in flight)."""
        return _nbytes(self.src_desc)

    @property
    def axes(self) -> list[int]:
        """For each axis of the target box, the axis of the logical box it comes from."""
        return _axes(len(self.src_desc.local_shape), self.transposes)


class _UnplannedPiece(NamedTuple):
    """A piece before its owner has planned it."""

    target: Target
    logical_key: str
    src_desc: Any
    dst_desc: Any
    transposes: tuple[str, ...]
    owner: str
    passthrough: bool
    cast: tuple[str, str, str] | None


def _logical_box(desc: Any, dtype: str) -> TargetSlice:
    return TargetSlice(
        tuple(desc.global_shape), tuple(desc.local_shape), tuple(desc.global_offset), dtype
    )


def _nbytes(desc: Any) -> int:
    return 4 * math.prod(int(d) for d in desc.local_shape)


def _axes(rank: int, transposes: tuple[str, ...]) -> list[int]:
    order = list(range(rank))
    for perm in transposes:
        order = [order[int(i)] for i in perm.strip("[]").split(",")]
    return order


def _split(
    src: Any, dst: Any, transposes: tuple[str, ...], max_bytes: int
) -> list[tuple[Any, Any]]:
    """(logical box, target box) cut along the first logical axis into pieces of at most
    ``max_bytes`` float32 bytes each (one row at least), so one huge tensor never has
    to be in flight whole. Cuts fall on multiples of ``ROW_ALIGN`` rows where they
    can, so block formats re-read few scale blocks."""
    shape = tuple(int(d) for d in src.local_shape)
    if not shape or 4 * math.prod(shape) <= max_bytes:
        return [(src, dst)]
    rows = rows_per_cut(shape, max_bytes)
    dst_axis = _axes(len(shape), transposes).index(0)
    out = []
    for start in range(0, shape[0], rows):
        n = min(rows, shape[0] - start)
        out.append((_cut(src, 0, start, n), _cut(dst, dst_axis, start, n)))
    return out


#: Chunk boundaries of split pieces fall on multiples of this many rows when possible.
ROW_ALIGN = 128
#: Float32 bytes a probe decodes at most (more when one row of the piece is larger).
PROBE_BYTES = 4 << 20


def rows_per_cut(shape: tuple[int, ...], max_bytes: int) -> int:
    """Rows of a box of ``shape`` that fit ``max_bytes`` of float32 (one at least), a
    multiple of ``ROW_ALIGN`` where that many fit, so block formats re-read few scale
    blocks."""
    nbytes = 4 * math.prod(shape)
    row_bytes = nbytes // shape[0] if shape[0] else nbytes
    rows = max(1, max_bytes // max(1, row_bytes))
    return rows - rows % ROW_ALIGN if rows >= ROW_ALIGN else rows


def _head(box: TargetSlice) -> TargetSlice:
    """The first rows of ``box``, at most :data:`PROBE_BYTES` of float32 (``box`` itself
    when it is that small already), cut along the first axis as :func:`_split` cuts."""
    shape = box.local_shape
    if not shape or 4 * math.prod(shape) <= PROBE_BYTES or shape[0] < 2:
        return box
    rows = rows_per_cut(shape, PROBE_BYTES)
    return replace(box, local_shape=(rows, *shape[1:]))


def _cut(desc: Any, axis: int, start: int, size: int) -> Any:
    """``desc`` narrowed to ``size`` elements from ``start`` (relative) along ``axis``."""
    offset = list(desc.global_offset)
    shape = list(desc.local_shape)
    offset[axis] += start
    shape[axis] = size
    return replace(desc, global_offset=tuple(offset), local_shape=tuple(shape))


def plan_pieces(ct: Composition, targets: list[Target], options: LoadOptions) -> list[Piece]:
    """Every (logical box -> target box) piece of the load, cut to
    ``options.max_inflight_bytes`` and planned by its owner: everything is validated
    here (shapes and dtypes included), before any data is read."""
    aoa_config, max_bytes = options.aoa_config, options.max_inflight_bytes
    from paddle.distributed.flex_checkpoint.aoa.aoa_engine import AOAEngine
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeightDesc

    source = {
        k: [ShardedWeightDesc(k, e.shape, e.shape, (0,) * len(e.shape), _NEUTRAL)]
        for k, e in ct.entries.items()
    }
    shards: dict[str, list[Target]] = {}
    for t in targets:  # a rank may hold several shards of one tensor (tuple-keyed targets)
        shards.setdefault(t.key, []).append(t)
    dest: dict[str, list[Any]] = {}
    untiled: dict[str, Target] = {}
    for key, held in shards.items():
        tilings = [all_boxes(t) for t in held]
        if tilings[0] and all(b == tilings[0] for b in tilings):
            dest[key] = tilings[0]  # every rank's boxes, as the even tiling implies them
        else:
            dest[key] = [_neutral(t) for t in held]
            untiled[key] = held[0]
    config = dict(aoa_config or {})
    statements = list(config.setdefault("aoa_statements", []))
    check_statements(ct, statements, source, dest, untiled)
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
            f"AOA statement {_naming(statements, missing)!r} names {missing!r}, which is "
            f"neither a logical tensor of {ct.checkpoint.path} nor a target"
        ) from None
    except Exception as exc:
        raise TargetError(
            f"AOA statements do not apply to the logical tensors of {ct.checkpoint.path}: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    drafts = [d for t in targets for d in _drafts(ct, engine, t, max_bytes)]
    probes = _smallest(drafts)
    pieces = [_planned(ct, d, i in probes) for i, d in enumerate(drafts)]
    for p in pieces:
        shape = [p.src_desc.local_shape[a] for a in p.axes]
        if tuple(shape) != tuple(p.dst_desc.local_shape):
            raise TargetError(
                f"target {p.target.key!r}: box {p.src_desc.local_shape} of {p.logical_key!r} "
                f"does not fit {p.dst_desc.local_shape}"
            )
    return pieces


def check_statements(
    ct: Composition,
    statements: list[str],
    source: dict[str, Any],
    dest: dict[str, Any],
    untiled: Mapping[str, Target] | None = None,
) -> None:
    """Raise TargetError, quoting the statement, for one that expands to nothing (a
    misspelled ``$LAYER_ID`` pattern), whose left side names no tensor, or that lays a
    fused tensor out by the shards of a target in ``untiled`` (a sharded target whose
    box does not tile its tensor evenly, so the other ranks' boxes are unknown); and,
    quoting both, for two statements (or two expansions of one) that write the same
    target: AOA would silently keep the last."""
    from paddle.distributed.flex_checkpoint.aoa.lexer import Lexer, TokenType

    context = _recording_context(source, dest)
    defined = set(source)
    written: dict[str, str] = {}  # target key -> the statement that writes it
    for statement in statements:
        lexer = Lexer(context)
        context.asked.clear()
        try:
            lexer.all_tokens([statement])
        except Exception as exc:
            raise TargetError(
                f"AOA statement {statement!r} is not valid: {type(exc).__name__}: {exc}"
            ) from None
        for key in context.asked:
            if untiled and key in untiled:
                t = untiled[key]
                raise TargetError(
                    f"target {key!r}: AOA statement {statement!r} lays the fused tensor "
                    f"out by its shards over all ranks, but this rank's box (offset "
                    f"{list(t.offset)}, shape {list(t.local_shape)} of {list(t.global_shape)}) "
                    "does not tile it evenly, so flexq cannot tell the other ranks' boxes "
                    "and a plain concatenation would load it wrong; shard it evenly "
                    "(as tensor parallelism does) or load it whole"
                )
        if not lexer.final_expressions:
            raise TargetError(
                f"AOA statement {statement!r} expands to nothing: no logical tensor of "
                f"{ct.checkpoint.path} matches its pattern"
            )
        for expression in lexer.final_expressions:
            tokens = lexer.tokenize(expression)
            arrow = next(
                (i for i, t in enumerate(tokens) if t.type == TokenType.RARROW), len(tokens)
            )
            for token in tokens[:arrow]:
                name = token.value.removesuffix("^T")
                # "_ -> X" is AOA's "X has no source" (PaddleFormers' gpt-oss rules say
                # so for its rotary buffers): nothing is read.
                if token.type == TokenType.IDENTIFIER and name not in defined and name != "_":
                    raise TargetError(
                        f"AOA statement {statement!r} reads {name!r}, which is no logical "
                        f"tensor of {ct.checkpoint.path} and no earlier statement's result"
                    )
            defined.update(t.value for t in tokens[arrow:] if t.type == TokenType.IDENTIFIER)
            for name in _written(tokens[arrow:], TokenType):
                if name not in dest:
                    continue  # AOA's own temporaries (``a^T`` -> a_transpose_tmp) may repeat
                if name in written:
                    first = written[name]
                    by = (
                        f"AOA statements {first!r} and {statement!r}"
                        if first != statement
                        else f"two expansions of AOA statement {first!r}"
                    )
                    raise TargetError(
                        f"target {name!r} is written twice, by {by} (AOA would silently "
                        "keep the last); write each target once"
                    )
                written[name] = statement


def _written(right: list[Any], kinds: Any) -> list[str]:
    """The names the right side of an AOA expression writes: its identifiers, less the
    options (``axis=1``, ``dtype='float16'``: an identifier followed by ``=``)."""
    return [
        t.value
        for i, t in enumerate(right)
        if t.type == kinds.IDENTIFIER
        and not (i + 1 < len(right) and right[i + 1].type == kinds.EQUAL)
    ]


def _naming(statements: list[str], name: object) -> str:
    """The first statement that mentions ``name`` (the whole list is too long to quote)."""
    return next((s for s in statements if isinstance(name, str) and name in s), "")


def _drafts(ct: Composition, engine: Any, t: Target, max_bytes: int) -> list[_UnplannedPiece]:
    where = f"target {t.key!r}"
    var = engine.output_vars.get(t.key)
    if var is None:
        raise TargetError(f"{where}: no tensor of that name in {ct.checkpoint.path} (after AOA)")
    if tuple(var.shape) != t.global_shape:
        built = sorted({s[0] for s in var.slices})
        owners = sorted({ct.entries[k].owner for k in built if k in ct.entries})
        raise TargetError(
            f"{where}: shape {list(t.global_shape)} does not match {list(var.shape)} "
            f"built from {built} (format {', '.join(owners)}) in {ct.checkpoint.path}"
        )
    try:
        mappings = engine.find_shard_sources(_neutral(t))
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
        what = f"{where} from {key!r} ({entry.owner}, {ct.checkpoint.path})"
        if casts and casts[-1] != t.dtype:
            raise TargetError(f"{what}: AOA casts to {casts[-1]} but the target is {t.dtype}")
        if t.dtype not in FLOAT_DTYPES and entry.dtype != t.dtype:
            raise TargetError(
                f"{what}: a {entry.dtype} tensor cannot be loaded into a {t.dtype} target"
            )
        if entry.dtype not in FLOAT_DTYPES and entry.dtype != t.dtype:
            turn = "integers into floats" if "int" in entry.dtype else "them into another dtype"
            raise TargetError(
                f"{what}: the checkpoint holds {entry.dtype} values; loading them into a "
                f"{t.dtype} target would turn {turn} (load into a {entry.dtype} target)"
            )
        transposes = tuple(p for p in post if p.startswith("["))
        src = replace(m.source_slice, dtype=t.dtype)
        dst = replace(m.target_slice, dtype=t.dtype)
        cast = (
            (t.key, entry.dtype, t.dtype)
            if entry.is_passthrough and entry.dtype != t.dtype
            else None
        )
        for s, d in _split(src, dst, transposes, max_bytes):
            out.append(
                _UnplannedPiece(t, key, s, d, transposes, entry.owner, entry.is_passthrough, cast)
            )
    return out


def _smallest(drafts: list[_UnplannedPiece]) -> set[int]:
    """The index of the smallest piece of every format (the passthrough owner aside)."""
    probes: dict[str, int] = {}
    for i, d in enumerate(drafts):
        if not d.passthrough and (
            d.owner not in probes or _nbytes(d.src_desc) < _nbytes(drafts[probes[d.owner]].src_desc)
        ):
            probes[d.owner] = i
    return set(probes.values())


def _planned(ct: Composition, d: _UnplannedPiece, probed: bool) -> Piece:
    """The draft planned by its owner, with the plan of its probe when ``probed``."""
    s = d.src_desc
    box = _logical_box(s, d.target.dtype)
    # One plan when the piece is its own probe (``probe is plan`` then).
    plans = [
        ct.plan(d.logical_key, b) for b in dict.fromkeys((box, _head(box)) if probed else (box,))
    ]
    plan, probe = plans[0], plans[-1] if probed else None
    # The probe reads inside the piece's own boxes (a source hands out no others).
    if probe is not None and not probe.reads_within(plan):
        probe = plan
    return Piece(d.target, d.logical_key, s, d.dst_desc, d.transposes, d.owner, plan, probe, d.cast)


def _recording_context(source: dict[str, Any], dest: dict[str, Any]) -> Any:
    """Paddle's AOAShardInfoContext over ``source`` and ``dest`` that records (in
    ``asked``) every target whose shard count a macro asks for: those are the
    targets a fuse lays out per rank."""
    from paddle.distributed.flex_checkpoint.aoa.aoa_engine import (
        AOAShardInfoContext,
        split_optimizer_state_key,
    )

    class Recording(AOAShardInfoContext):  # type: ignore[misc]
        asked: set[str]

        def get_dst_state_shard_num(self, dst_state_key: str) -> int:
            key = split_optimizer_state_key(dst_state_key)[0]
            self.asked.update((key, self.resolve_mapping_chain(key, reverse=False)))
            return int(super().get_dst_state_shard_num(dst_state_key))

    context = Recording(source, dest, False)
    context.asked = set()
    return context


#: Most boxes :func:`all_boxes` infers for one tensor (a finer tiling is no parallel layout).
MAX_TILES = 1 << 12


def all_boxes(t: Target) -> list[Any]:
    """Every rank's box of ``t``'s tensor as this rank's box implies it: the even tiling of
    the global shape by the local box (one box for a whole tensor), in AOA's neutral
    dtype; empty when the local box does not tile the global shape evenly (or would
    take more than :data:`MAX_TILES` boxes, far beyond any parallel layout)."""
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeightDesc

    counts = []
    for size, local, offset in zip(t.global_shape, t.local_shape, t.offset, strict=True):
        if local == size:
            counts.append(1)  # whole along this axis (a zero-sized one too)
        elif local <= 0 or size % local or offset % local:
            return []
        else:
            counts.append(size // local)
    if math.prod(counts) > MAX_TILES:
        return []
    return [
        ShardedWeightDesc(
            t.key,
            t.local_shape,
            t.global_shape,
            tuple(i * local for i, local in zip(index, t.local_shape, strict=True)),
            _NEUTRAL,
        )
        for index in itertools.product(*(range(n) for n in counts))
    ]


def _neutral(t: Target) -> Any:
    """Paddle's ShardedWeightDesc of target ``t``, in AOA's neutral dtype."""
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeightDesc

    return ShardedWeightDesc(t.key, t.local_shape, t.global_shape, t.offset, _NEUTRAL)
