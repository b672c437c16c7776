"""Put :class:`~flexq.nn.QuantizedLinear` in place of each linear a checkpoint quantized.

For :func:`flexq.paddleformers.from_pretrained` with ``keep_quantized=True`` (and
anyone building a model that keeps its checkpoint's weights): :func:`plan` maps
every linear's weight, through the model's own AOA conversion rules, to the
checkpoint's logical tensor it comes from (the same planner a load uses, run on
metadata only); :func:`swap` replaces the quantized ones; :func:`targets` turns the
model's state dict into one whose kept weights are :class:`flexq.QuantizedTarget`
keyed by their logical names, and :func:`flexq.nn.rules.for_kept` drops the ``^T`` of
the statements that move them: a kept weight stays ``[out, in]``, as the checkpoint
stores it and as ``fp8_gemm_blockwise`` takes it.

gpt-oss's MXFP4 stacked experts are kept too (:mod:`flexq.nn.experts`). Under
tensor parallelism a kept linear takes the place of Paddle's column- or row-parallel
linear and holds this rank's shard (:mod:`flexq.nn.parallel`).

A linear that a fuse rule lays out from several pieces (PaddleFormers' ``fused_qkv``
with its head-group interleave, ``fused_ffn``, Phi-3's ``fused_qkv_old``) is kept
under the model's own key: the rule, adjusted by :func:`~flexq.nn.rules.for_kept`,
moves values and scales together through the kept AOA fuse
(:mod:`flexq.load.kept_boxes`), and the load refuses, before any read, a piece that
cuts a block (a :class:`~flexq.errors.TargetError` naming the statement).

Refused, before anything is read (a :class:`~flexq.errors.TargetError` naming the
tensor): a quantized logical tensor that lands on neither a linear nor gpt-oss
experts, a fuse of quantized and unquantized pieces or of scale grids that do not
combine (per-tensor scales, different blocks), a kept linear form other than 2-D FP8.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flexq.errors import TargetError
from flexq.load.kept import QuantizedTarget
from flexq.load.kept_forms import form_of
from flexq.load.pieces import plan_pieces
from flexq.load.report import LoadOptions
from flexq.load.targets import describe
from flexq.nn import experts, parallel
from flexq.nn.forms import KeptForm, fp8_form
from flexq.nn.linear import QuantizedLinear

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.load.pieces import Piece
    from flexq.nn.parallel import Split

#: a staging bound no tensor reaches.
_UNBOUNDED = 1 << 62


@dataclass(frozen=True)
class KeptLinear:
    """One linear to keep quantized.

    :ivar prefix: the layer's name in the model (``llama.layers.0.self_attn.q_proj``).
    :ivar logical_key: the key its :class:`flexq.QuantizedTarget` loads by: the
        checkpoint's logical weight it holds, or for a fused linear the model's own key
        (``....qkv_proj.weight``), which the model's fuse rule fills from ``sources``.
    :ivar form: how the weight is kept.
    :ivar bias: whether the layer has a bias.
    :ivar sources: a fused linear's logical weights (empty otherwise).
    :ivar split: its tensor-parallel shard (None on one rank): ``form`` is the shard's.
    """

    prefix: str
    logical_key: str
    form: KeptForm
    bias: bool
    sources: tuple[str, ...] = ()
    split: Split | None = None


@dataclass(frozen=True)
class KeptExperts:
    """One stacked ``[E, in, out]`` expert weight to keep as MXFP4 (:mod:`flexq.nn.experts`).

    :ivar prefix: the module's name; :ivar name: its parameter (``gate_up_proj``).
    """

    prefix: str
    name: str
    logical_key: str


def plan(
    model: Any,
    ct: Composition,
    aoa_config: dict[str, Any] | None,
    weights: dict[str, Any] | None = None,
) -> list[KeptLinear | KeptExperts]:
    """The linears of ``model`` whose weights the checkpoint quantized, with their forms.

    :param weights: the targets the load will fill (default ``model.sharded_state_dict()``).
    :raises TargetError: on a quantized tensor that cannot be kept (see the module doc).
    """
    weights = model.sharded_state_dict() if weights is None else weights
    # No byte bound: one piece per (logical tensor, target) pair, never cut for staging.
    options = LoadOptions(aoa_config, _UNBOUNDED, False, None, False, {})
    by_target: dict[str, list[Piece]] = defaultdict(list)
    for p in plan_pieces(ct, describe(weights), options):
        by_target[p.target.key].append(p)
    layers: dict[str, Any] = dict(model.named_sublayers())
    out: list[KeptLinear | KeptExperts] = []
    for key, pieces in sorted(by_target.items()):
        quantized = sorted(
            {p.logical_key for p in pieces if not ct.entries[p.logical_key].is_passthrough}
        )
        if not quantized:
            continue
        prefix, _, leaf = key.rpartition(".")
        layer = layers.get(prefix)
        if len(pieces) == 1 and _is_stacked_mxfp4(ct, quantized[0], pieces[0]):
            out.append(KeptExperts(prefix, leaf, quantized[0]))
            continue
        if (
            leaf != "weight"
            or layer is None
            or not _is_linear(layer)
            or any(p.axes != [1, 0] for p in pieces)
        ):
            raise TargetError(
                f"keep_quantized: the quantized tensor {quantized[0]!r} ({pieces[0].owner}) "
                f"loads into {key!r}, which is not the weight of a linear layer; only "
                "linears are kept, and gpt-oss MXFP4 experts: load without keep_quantized"
            )
        sources = tuple(sorted({p.logical_key for p in pieces}))
        fused = len(pieces) > 1
        form = _form(ct, key, sources, *parallel.local_shape(pieces[0].target))
        out.append(
            KeptLinear(
                prefix,
                key if fused else sources[0],
                form,
                layer.bias is not None,
                sources if fused else (),
                parallel.split_of(layer, pieces[0].target),
            )
        )
    return out


def _is_stacked_mxfp4(ct: Composition, key: str, piece: Piece) -> bool:
    """gpt-oss's MXFP4 experts, loaded as they are laid out (``[E, in, out]``, no transpose)."""
    stored = form_of(ct, key)
    return stored.kind == "mxfp4" and stored.gpt_oss and piece.axes == [0, 1, 2]


def _is_linear(layer: Any) -> bool:
    """A dense ``x @ W + b`` layer with its weight stored ``[in, out]`` (paddle.nn.Linear
    and PaddleFormers' own linears)."""
    import paddle

    weight = getattr(layer, "weight", None)
    return (
        isinstance(layer, paddle.nn.Linear) or type(layer).__name__.endswith("Linear")
    ) and getattr(weight, "ndim", 0) == 2


def _form(ct: Composition, key: str, sources: tuple[str, ...], n: int, k: int) -> KeptForm:
    """The form of the ``[n, k]`` weight (this rank's shard) that target ``key`` holds,
    from the kept forms of the logical weights it is laid out from: one, or those a
    fuse rule (fused_qkv, fused_ffn, fused_qkv_old) combines, which must share one
    scale grid. Whether each piece falls on the block is checked by the load
    (:mod:`flexq.load.kept`), before anything is read."""
    plain = [s for s in sources if ct.entries[s].is_passthrough]
    if plain:
        raise TargetError(
            f"keep_quantized: {key!r} is fused from quantized "
            f"{sorted(set(sources) - set(plain))} and unquantized {plain}; a kept weight is "
            "quantized throughout: load without keep_quantized"
        )
    stored = {s: form_of(ct, s) for s in sources}
    for s, f in stored.items():
        if f.kind != "fp8" or len(f.shape) != 2:
            raise TargetError(
                f"keep_quantized: {s!r} is a {f.kind} {list(f.shape)} weight ({f.owner}); "
                "only 2-D FP8 linears are kept by from_pretrained so far: load without "
                "keep_quantized"
            )
    blocks = {f.block for f in stored.values()}
    if len(sources) > 1 and (len(blocks) != 1 or any(f.per_tensor for f in stored.values())):
        said = ", ".join(
            f"{s}: {'one scale a tensor' if f.per_tensor else f'block {list(f.block)}'}"
            for s, f in stored.items()
        )
        raise TargetError(
            f"keep_quantized: {key!r} is fused from {list(sources)}, whose scales ({said}) "
            "do not combine into one grid (per-tensor scales never do): load without "
            "keep_quantized"
        )
    first = stored[sources[0]]
    if first.per_tensor:
        return fp8_form(n, k, "tensor")
    if first.block == (1, first.shape[1]):
        return fp8_form(n, k, "channel")
    return fp8_form(n, k, "block", (first.block[0], first.block[1]))


def swap(model: Any, kept: list[KeptLinear | KeptExperts], bias_dtype: str) -> None:
    """Replace each planned linear of ``model`` by an empty :class:`QuantizedLinear`, and
    each planned expert weight by its kept parts (:func:`flexq.nn.experts.keep`)."""
    for k in kept:
        if isinstance(k, KeptExperts):
            experts.keep(dict(model.named_sublayers())[k.prefix], k.name, k.logical_key)
            continue
        parent_name, _, child = k.prefix.rpartition(".")
        parent = model if not parent_name else dict(model.named_sublayers())[parent_name]
        layer = QuantizedLinear(k.form, bias=k.bias, bias_dtype=bias_dtype, split=k.split)
        layer.logical_key = k.logical_key
        setattr(parent, child, layer)


def targets(model: Any, state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` (the model's, by its keys) with each swapped-in linear's values and
    scales as one :class:`flexq.QuantizedTarget` under its logical key (a bias stays
    ordinary)."""
    out = dict(state_dict)
    for prefix, layer in model.named_sublayers():
        if isinstance(layer, QuantizedLinear) and layer.logical_key is not None:
            values = out.pop(f"{prefix}.weight")
            scales = out.pop(f"{prefix}.{layer.scale_name}")
            out[layer.logical_key] = QuantizedTarget(values, scales)
        for stack in getattr(layer, experts.KEPT, {}).values():
            values = out.pop(f"{prefix}.{stack.values_name}")
            scales = out.pop(f"{prefix}.{stack.scales_name}")
            out[stack.logical_key] = QuantizedTarget(values, scales)
    return out
