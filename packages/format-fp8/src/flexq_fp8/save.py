"""Write a whole FP8 checkpoint (weights, scales, unquantized tensors, config.json).

For tests, the demo and users: quantizes each given float weight with
:func:`flexq_fp8.quantize` and writes the ``quantization_config`` the chosen
producer would write, so the checkpoint looks like a published one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from flexq import RawTensor, save_checkpoint
from flexq_fp8.encode import Layout, ScaleDtype, quantize
from flexq_fp8.layout import DEFAULT_BLOCK

if TYPE_CHECKING:
    import numpy as np

#: Whose config.json dialect (and scale names) to write.
Producer = Literal["fp8", "fbgemm", "compressed-tensors"]
_DEFAULT_PRODUCER: dict[str, Producer] = {
    "tensor": "fp8",
    "block": "fp8",
    "channel": "fbgemm",
    "group": "compressed-tensors",
}
_PRODUCER_LAYOUTS: dict[Producer, tuple[str, ...]] = {
    "fp8": ("tensor", "block"),
    "fbgemm": ("channel",),
    "compressed-tensors": ("tensor", "channel", "group", "block"),
}


def save_fp8_checkpoint(
    directory: str | os.PathLike[str],
    weights: Mapping[str, np.ndarray],
    *,
    layout: Layout = "block",
    block_size: int | tuple[int, int] | None = None,
    scale_dtype: ScaleDtype = "F32",
    producer: Producer | None = None,
    others: Mapping[str, RawTensor] | None = None,
    ignored: Sequence[str] = (),
    shard_of: Mapping[str, int] | None = None,
    max_shard_bytes: int | None = None,
    torch_dtype: str = "bfloat16",
) -> Path:
    """Quantize ``weights`` (key -> float array) and write them with ``others`` to ``directory``.

    :param producer: ``fp8`` (vLLM / DeepSeek names and config), ``fbgemm`` or
        ``compressed-tensors``; defaults by layout.
    :param others: tensors written as they are (norms, embeddings, ignored layers).
    :param ignored: module names the config lists as unquantized.
    :param shard_of: tensor key (weights, their scales, others) -> shard number.
    :return: the directory.
    """
    producer = producer or _DEFAULT_PRODUCER[layout]
    if layout not in _PRODUCER_LAYOUTS[producer]:
        raise ValueError(f"producer {producer!r} does not write the {layout!r} layout")
    suffix = "_scale_inv" if (producer, layout) == ("fp8", "block") else "_scale"
    tensors: dict[str, RawTensor] = {}
    for key, w in weights.items():
        tensors.update(
            quantize(
                w,
                layout=layout,
                block_size=block_size,
                scale_dtype=scale_dtype,
                key=key,
                scale_suffix=suffix,
            )
        )
    tensors.update(others or {})
    qc = quantization_config(producer, layout, block_size, scale_dtype, ignored)
    config = {"torch_dtype": torch_dtype, "quantization_config": qc}
    return save_checkpoint(
        directory, tensors, config=config, shard_of=shard_of, max_shard_bytes=max_shard_bytes
    )


def quantization_config(
    producer: Producer,
    layout: Layout,
    block_size: int | tuple[int, int] | None,
    scale_dtype: ScaleDtype,
    ignored: Sequence[str],
) -> dict[str, Any]:
    """The ``quantization_config`` ``producer`` writes for ``layout``."""
    if producer == "fbgemm":
        return {
            "quant_method": "fbgemm_fp8",
            "activation_scale_ub": 1200.0,
            "modules_to_not_convert": list(ignored),
        }
    if producer == "fp8":
        qc: dict[str, Any] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
        if layout == "block":
            qc["fmt"] = "e4m3"
            qc["weight_block_size"] = list(_pair(block_size))
            if scale_dtype in ("F8_E8M0", "U8"):
                qc["scale_fmt"] = "ue8m0"
            qc["modules_to_not_convert"] = list(ignored)
        else:
            qc["ignored_layers"] = list(ignored)
        return qc
    weights: dict[str, Any] = {
        "num_bits": 8,
        "type": "float",
        "symmetric": True,
        "dynamic": False,
        "strategy": layout,
        "group_size": None,
        "block_structure": None,
    }
    if layout == "group":
        weights["group_size"] = DEFAULT_BLOCK if block_size is None else block_size
    if layout == "block":
        weights["block_structure"] = list(_pair(block_size))
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None}
        },
        "ignore": list(ignored),
    }


def _pair(block_size: int | tuple[int, int] | None) -> tuple[int, int]:
    if block_size is None:
        return DEFAULT_BLOCK, DEFAULT_BLOCK
    if isinstance(block_size, int):
        return block_size, block_size
    return int(block_size[0]), int(block_size[1])
