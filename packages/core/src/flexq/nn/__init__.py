"""Paddle layers that compute with kept (still quantized) weights.

For users serving FP8 / MXFP4 / NVFP4 checkpoints: :class:`QuantizedLinear` and
the forms it holds (:class:`KeptForm`, made by :func:`fp8_form` / :func:`fp4_form`).
:mod:`flexq.nn.experts` keeps stacked MXFP4 experts;
``flexq.paddleformers.from_pretrained(..., keep_quantized=True)`` builds models with both.
"""

from __future__ import annotations

from flexq.nn.forms import KeptForm, dequantize, fp4_form, fp8_form
from flexq.nn.linear import QuantizedLinear

__all__ = ["KeptForm", "QuantizedLinear", "dequantize", "fp4_form", "fp8_form"]
