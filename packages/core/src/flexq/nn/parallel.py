"""Tensor-parallel kept linears: which shard of the kept weight a rank holds, and the
communication around its matmul.

For :class:`~flexq.nn.QuantizedLinear` in a model built with PaddleFormers'
``tensor_model_parallel_size`` (``flexq.paddleformers.from_pretrained(...,
keep_quantized=True)``): a kept linear takes the place of Paddle's
``ColumnParallelLinear`` (each rank holds ``out / world`` outputs: Shard on N) or
``RowParallelLinear`` (``in / world`` inputs: Shard on K, partial sums all-reduced),
with the same forward communication (``mp_ops._c_identity`` before a column
matmul, ``_c_concat`` when it gathers, ``_mp_allreduce`` after a row matmul) and a
``sharded_state_dict`` whose boxes are the rank's block-aligned kept shard: values
``[N, K]`` and the scale blocks that cover them. A shard that cuts a block is refused
by the load before any read (:mod:`flexq.load.kept`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from flexq.errors import TargetError
from flexq.plan import ceil_div

if TYPE_CHECKING:
    from flexq.load.targets import Target

#: Paddle's tensor-parallel linear classes, by the shard a rank holds.
STYLES: dict[str, Literal["column", "row"]] = {
    "ColumnParallelLinear": "column",
    "RowParallelLinear": "row",
}


@dataclass(frozen=True)
class Split:
    """One rank's shard of a kept ``[N, K]`` weight and the group it is split over.

    :ivar style: ``column`` (Shard on N, outputs) or ``row`` (Shard on K, inputs).
    :ivar out_features: ``N`` of the whole weight. :ivar in_features: ``K``.
    :ivar offset: where the rank's ``[N_local, K_local]`` shard starts, ``(n, k)``.
    :ivar group: the model-parallel communication group.
    :ivar gather_output: column only: concatenate the outputs over the group.
    """

    style: Literal["column", "row"]
    out_features: int
    in_features: int
    offset: tuple[int, int]
    group: Any
    gather_output: bool = False

    def enter(self, x: Any) -> Any:
        """The input as the rank's matmul takes it."""
        from paddle.distributed.fleet.layers.mpu import mp_ops

        if self.style == "column":
            return mp_ops._c_identity(x, group=self.group)
        return x  # row-parallel: the input arrives split (input_is_parallel)

    def leave(self, y: Any) -> Any:
        """The rank's matmul output as the next layer takes it."""
        from paddle.distributed.fleet.layers.mpu import mp_ops

        if self.style == "row":
            return mp_ops._mp_allreduce(
                y, group=self.group, use_calc_stream=True, use_model_parallel=True
            )
        return mp_ops._c_concat(y, group=self.group) if self.gather_output else y

    def boxes(self, layer: Any, prefix: str) -> dict[str, Any]:
        """``layer``'s parameters as ShardedWeights of the whole kept weight."""
        from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

        form = layer.form
        n, k = self.out_features, self.in_features
        local = (form.out_features, form.in_features)
        out = {
            f"{prefix}weight": ShardedWeight(
                f"{prefix}weight", layer.weight, local, (n, k), self.offset
            )
        }
        scale = layer.scales
        key = f"{prefix}{layer.scale_name}"
        if form.per_tensor:
            out[key] = ShardedWeight(
                key, scale, tuple(scale.shape), tuple(scale.shape), (0,) * len(scale.shape)
            )
        else:
            bn, bk = form.block
            grid = (ceil_div(n, bn), ceil_div(k, bk))
            at = (self.offset[0] // bn, self.offset[1] // bk)
            out[key] = ShardedWeight(key, scale, tuple(scale.shape), grid, at)
        if layer.bias is not None:
            b = f"{prefix}bias"
            if self.style == "column":
                out[b] = ShardedWeight(b, layer.bias, (local[0],), (n,), (self.offset[0],))
            else:
                out[b] = ShardedWeight(b, layer.bias, (n,), (n,), (0,))
        return out


def split_of(layer: Any, target: Target) -> Split | None:
    """How Paddle's tensor-parallel ``layer`` (about to be kept) splits its weight, whose
    ``[in, out]`` box on this rank is ``target``; None for a layer that is not split.

    :raises TargetError: on a split linear of another kind (sequence-parallel ones).
    """
    name = type(layer).__name__
    style = STYLES.get(name)
    if style is None:
        if "Parallel" in name:
            raise TargetError(
                f"keep_quantized: {target.key!r} is a {name}; kept linears take the place "
                "of ColumnParallelLinear and RowParallelLinear only (no sequence "
                "parallelism): load without keep_quantized"
            )
        return None
    if int(getattr(layer, "world_size", 1) or 1) <= 1:
        return None
    if style == "row" and not getattr(layer, "input_is_parallel", True):
        raise TargetError(
            f"keep_quantized: {target.key!r} is a RowParallelLinear that splits its own "
            "input; kept row-parallel linears take it split: load without keep_quantized"
        )
    k, n = target.global_shape  # Paddle's [in, out]
    k_at, n_at = target.offset
    gather = bool(getattr(layer, "gather_output", False))
    return Split(style, n, k, (n_at, k_at), layer.model_parallel_group, gather)


def local_shape(target: Target) -> tuple[int, int]:
    """The rank's ``[N_local, K_local]`` kept shard of a linear whose ``[in, out]`` box is
    ``target``."""
    k, n = target.local_shape
    return n, k
