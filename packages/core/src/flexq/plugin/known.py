"""The formats flexq's project publishes, by the config methods they decode.

For error messages only: when a checkpoint's config names a method no
installed format claims, the composer says which distribution decodes it.
Which formats are installed is always read from the registry, never from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: config method -> (format name, distribution that provides it).
PUBLISHED = {
    "fp8": ("fp8", "flexq-format-fp8"),
    "fbgemm_fp8": ("fp8", "flexq-format-fp8"),
    "compressed-tensors/float-quantized": ("fp8", "flexq-format-fp8"),
    "mxfp4": ("mxfp4", "flexq-format-mxfp4"),
    "compressed-tensors/mxfp4-pack-quantized": ("mxfp4", "flexq-format-mxfp4"),
    "awq": ("int4-awq", "flexq-format-int4-awq"),
    "gptq": ("gptq", "flexq-format-gptq"),
    "auto-round": ("gptq", "flexq-format-gptq"),
    "compressed-tensors/pack-quantized": ("ct-int", "flexq-format-ct-int"),
    "compressed-tensors/int-quantized": ("ct-int", "flexq-format-ct-int"),
    "compressed-tensors/nvfp4-pack-quantized": ("nvfp4", "flexq-format-nvfp4"),
    "modelopt": ("nvfp4", "flexq-format-nvfp4"),
    "bitsandbytes": ("bitsandbytes", "flexq-format-bitsandbytes"),
}

#: compressed-tensors formats that store plain (unquantized) weights.
_CT_PLAIN = frozenset({"dense", "mixed-precision"})


def config_methods(qc: Mapping[str, Any]) -> set[str]:
    """The methods a ``quantization_config`` names, spelled as formats claim them.

    ``{"quant_method": "gptq"}`` -> ``{"gptq"}``; compressed-tensors configs give
    ``"compressed-tensors/<format>"`` for the top-level format and every config
    group's, or ``{"compressed-tensors"}`` when none is named.
    """
    method = qc.get("quant_method")
    if not isinstance(method, str) or not method:
        return set()
    method = method.lower()
    if method != "compressed-tensors":
        return {method}
    formats = {qc["format"]} if isinstance(qc.get("format"), str) else set()
    groups = qc.get("config_groups")
    if isinstance(groups, Mapping):
        for group in groups.values():
            if isinstance(group, Mapping) and isinstance(group.get("format"), str):
                formats.add(group["format"])
    named = {f"{method}/{f}" for f in formats - _CT_PLAIN}
    return named or ({method} if not formats else set())
