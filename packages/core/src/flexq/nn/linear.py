"""``QuantizedLinear``: a Paddle linear layer that holds its weight in a kept form.

For users serving FP8 / FP4 checkpoints without dequantizing them (issue 26): the
layer stores the checkpoint's own values and scales (:mod:`flexq.nn.forms`) as
non-trainable parameters, so a model built with it takes about 0.5x (FP8) or
0.27x (FP4) of a bf16 model's parameter memory, and :func:`flexq.load_state_dict`
fills them through :class:`flexq.QuantizedTarget`.

Forward: on a CUDA build, for the FP8 128x128 block form with float32 scales,
Paddle's ``fp8_gemm_blockwise`` (activations quantized 1x128 by
``fp8_quant_blockwise``, TN layout). Everywhere else (CPU, other forms) the
reference: the weight dequantized by its format's decoder in float32, a float32
matmul, one cast to the activation dtype, which equals a ``paddle.nn.Linear``
holding the dequantized weight bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import paddle

from flexq.errors import TargetError
from flexq.nn.forms import KeptForm, dequantize

if TYPE_CHECKING:
    from flexq.nn.parallel import Split

#: the one block shape ``fp8_gemm_blockwise`` takes for a weight.
_KERNEL_BLOCK = (128, 128)


class QuantizedLinear(paddle.nn.Layer):  # type: ignore[misc]  # paddle ships no stubs
    """``y = x @ W.T + bias`` with ``W`` ``[out_features, in_features]`` kept quantized.

    Parameters (all with ``stop_gradient=True``; what a state dict holds):

    - ``weight``: the values, :attr:`KeptForm.values_shape` / ``values_dtype``;
    - ``weight_scale_inv`` (FP8, the DeepSeek-V3 / vLLM name; value = values * scale) or
      ``weight_scale`` (MXFP4, NVFP4): :attr:`KeptForm.scales_shape` / ``scales_dtype``;
    - ``weight_global_scale`` (NVFP4): float32 ``[1]``;
    - ``bias`` (optional): ``[out_features]`` in ``bias_dtype`` (default Paddle's).

    :param form: the kept form (:func:`flexq.nn.forms.fp8_form`, :func:`~flexq.nn.forms.fp4_form`).
    :param bias: whether the layer has a bias.
    :param split: this rank's tensor-parallel shard (:mod:`flexq.nn.parallel`): ``form``
        is then the shard's ``[N_local, K_local]``, a column-parallel bias the shard's
        outputs, and the forward communicates as Paddle's parallel linears do.
    """

    def __init__(
        self,
        form: KeptForm,
        *,
        bias: bool = False,
        bias_dtype: str | None = None,
        split: Split | None = None,
    ) -> None:
        super().__init__()
        self.form = form
        self.split = split
        self.in_features = form.in_features
        self.out_features = form.out_features
        self.weight = self._frozen(form.values_shape, form.values_dtype)
        scale = self._frozen(form.scales_shape, form.scales_dtype)
        self.scale_name = "weight_scale_inv" if form.kind == "fp8" else "weight_scale"
        setattr(self, self.scale_name, scale)
        self.weight_global_scale = self._frozen((1,), "float32") if form.has_global_scale else None
        self.bias = (
            self.create_parameter(
                [form.out_features], dtype=bias_dtype or paddle.get_default_dtype(), is_bias=True
            )
            if bias
            else None
        )

    def _frozen(self, shape: tuple[int, ...], dtype: str) -> Any:
        """A non-trainable parameter (zeros until loaded; no storage under LazyGuard)."""
        p = self.create_parameter(
            list(shape), dtype=dtype, default_initializer=paddle.nn.initializer.Constant(0)
        )
        p.stop_gradient = True
        return p

    @property
    def scales(self) -> Any:
        """The scale parameter, whatever its name."""
        return getattr(self, self.scale_name)

    def dequantized(self) -> Any:
        """The float32 ``[out_features, in_features]`` weight, decoded by its format."""
        values = self.weight.view(paddle.uint8) if self.form.kind == "fp8" else self.weight
        scales = self.scales
        if scales.dtype == paddle.float8_e4m3fn:
            scales = scales.view(paddle.uint8)
        glob = self.weight_global_scale
        if values.place.is_cpu_place():
            # The formats' numpy paths (the tested, threaded ones) on host memory.
            out = dequantize(
                self.form,
                values.numpy(),
                scales.numpy(),
                None if glob is None else glob.numpy(),
            )
            return paddle.to_tensor(out)
        return dequantize(self.form, values, scales, glob)

    def forward(self, x: Any) -> Any:
        """``x`` ``[..., in_features]`` -> ``[..., out_features]`` in ``x``'s dtype."""
        if x.shape[-1] != self.in_features:
            raise TargetError(
                f"QuantizedLinear({self.in_features} -> {self.out_features}): input has "
                f"{x.shape[-1]} features"
            )
        split = self.split
        # A row-parallel bias is added once, to the sum over the ranks.
        row = split is not None and split.style == "row"
        if split is not None:
            x = split.enter(x)
        if self._kernel_applies(x):
            y = self._fp8_gemm(x, None if row else self.bias)
        else:
            weight = self.dequantized().t()  # [in, out], as paddle.nn.Linear holds it
            bias = None if self.bias is None or row else self.bias.astype("float32")
            y = paddle.nn.functional.linear(x.astype("float32"), weight, bias).astype(x.dtype)
        if split is None:
            return y
        y = split.leave(y)
        return y + self.bias.astype(y.dtype) if row and self.bias is not None else y

    def sharded_state_dict(self, structured_name_prefix: str = "") -> dict[str, Any]:
        """The parameters as ShardedWeights: a tensor-parallel layer's as boxes of the
        whole kept weight (:meth:`flexq.nn.parallel.Split.boxes`), as Paddle's parallel
        linears declare theirs."""
        if self.split is None:
            return super().sharded_state_dict(structured_name_prefix)  # type: ignore[no-any-return]
        return self.split.boxes(self, structured_name_prefix)

    def _kernel_applies(self, x: Any) -> bool:
        """Whether ``fp8_gemm_blockwise`` computes this forward (CUDA, FP8 128x128 float32)."""
        f = self.form
        return bool(
            paddle.is_compiled_with_cuda()
            and not self.weight.place.is_cpu_place()
            and f.kind == "fp8"
            and f.block == _KERNEL_BLOCK
            and f.scale_dtype == "float32"
            and f.in_features % _KERNEL_BLOCK[1] == 0
            and x.dtype in (paddle.bfloat16, paddle.float16)
        )

    def _fp8_gemm(self, x: Any, bias: Any) -> Any:
        """The CUDA path, laid out as Paddle's own 1x128 x 128x128 test does: the weight
        (128x128 decode scales, ``[N/128, K/128]``) as ``a``, the activations (1x128,
        scales transposed to ``[K/128, M]``) as ``b``, the ``[N, M]`` result transposed.
        Untested here (CPU build); see docs/serving.md."""
        from paddle.incubate.nn.functional import fp8_gemm_blockwise, fp8_quant_blockwise

        lead = list(x.shape[:-1])
        a = x.reshape([-1, self.in_features])
        qa, sa = fp8_quant_blockwise(
            a, quant_method="1x128", output_scale_transpose=True, using_pow2_scale=False
        )
        y = fp8_gemm_blockwise(
            self.weight,
            self.scales,
            qa,
            sa,
            x.dtype,
            is_a_1d_scaled=False,
            is_b_1d_scaled=True,
        ).t()
        if bias is not None:
            y = y + bias.astype(x.dtype)  # the kernel takes no bias
        return y.reshape([*lead, self.out_features])

    def extra_repr(self) -> str:
        f = self.form
        return (
            f"in_features={f.in_features}, out_features={f.out_features}, kind={f.kind}, "
            f"block={list(f.block)}, bias={self.bias is not None}"
        )
