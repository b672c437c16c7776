"""Stacked expert weights kept as MXFP4, decoded only while their module computes.

For users serving gpt-oss-style MoE checkpoints (issue 26): a module that holds
its experts as one ``[E, in, out]`` parameter (PaddleFormers' ``GptOssExperts``
``gate_up_proj`` / ``down_proj``) gets, by :func:`keep`, the checkpoint's kept
MXFP4 form instead: ``{name}_blocks`` uint8 ``[E, out, in/2]`` and
``{name}_scales`` uint8 E8M0 ``[E, out, in/32]`` (the quantization axis last, as
the checkpoint stores them), about 0.27x of the bf16 bytes. While the module's
``forward`` runs, ``name`` is the float32 ``[E, in, out]`` weight decoded by
``flexq_mxfp4`` (the function a dequantizing load uses) and cast to the module's
dtype; afterwards it is gone again. Correct on CPU and GPU; a fused MXFP4 MoE
kernel would be faster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import paddle

from flexq.nn.forms import dequantize as dequantize_form
from flexq.nn.forms import fp4_form

#: attribute of a module with kept experts: parameter name -> its :class:`KeptStack`.
KEPT = "_flexq_kept_stacks"


@dataclass(frozen=True)
class KeptStack:
    """One kept stacked weight of a module.

    :ivar name: the dense parameter it replaces (``gate_up_proj``).
    :ivar logical_key: the checkpoint's logical tensor it loads from.
    :ivar experts: ``E``. :ivar in_features: ``in``. :ivar out_features: ``out``.
    :ivar dtype: the dtype the dense parameter had (what ``forward`` sees).
    """

    name: str
    logical_key: str
    experts: int
    in_features: int
    out_features: int
    dtype: str

    @property
    def values_name(self) -> str:
        return f"{self.name}_blocks"

    @property
    def scales_name(self) -> str:
        return f"{self.name}_scales"

    def dense(self, module: Any) -> Any:
        """The ``[E, in, out]`` weight, decoded and cast to :attr:`dtype`."""
        form = fp4_form("mxfp4", self.out_features, self.in_features)
        values = getattr(module, self.values_name)
        scales = getattr(module, self.scales_name)
        if values.place.is_cpu_place():
            w = paddle.to_tensor(dequantize_form(form, values.numpy(), scales.numpy()))
        else:
            w = dequantize_form(form, values, scales)
        return w.transpose([0, 2, 1]).astype(self.dtype)


def keep(module: Any, name: str, logical_key: str) -> KeptStack:
    """Replace ``module``'s ``[E, in, out]`` parameter ``name`` by its kept MXFP4 parts."""
    dense = module._parameters.pop(name)
    experts, inp, out = (int(d) for d in dense.shape)
    stack = KeptStack(name, logical_key, experts, inp, out, str(dense.dtype).split(".")[-1])
    for part, shape in (
        (stack.values_name, [experts, out, inp // 2]),
        (stack.scales_name, [experts, out, inp // 32]),
    ):
        p = module.create_parameter(
            shape, dtype="uint8", default_initializer=paddle.nn.initializer.Constant(0)
        )
        p.stop_gradient = True
        setattr(module, part, p)
    if not hasattr(module, KEPT):
        object.__setattr__(module, KEPT, {})
        module.register_forward_pre_hook(_decode)
        module.register_forward_post_hook(_drop)
    getattr(module, KEPT)[name] = stack
    return stack


def _decode(module: Any, inputs: Any) -> None:
    for stack in getattr(module, KEPT).values():
        object.__setattr__(module, stack.name, stack.dense(module))


def _drop(module: Any, inputs: Any, outputs: Any) -> None:
    for stack in getattr(module, KEPT).values():
        module.__dict__.pop(stack.name, None)
