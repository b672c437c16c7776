"""The formats flexq's project publishes, by the config methods they decode.

For error messages: when a checkpoint's config names a method no installed
format claims, the composer says which distribution decodes it; and for the
registry, which keeps a first-party format when another distribution offers
the same name. Which formats are installed is always read from the registry,
never from here.

``PUBLISHED`` (config method -> the (format, distribution) pairs that decode it)
is re-exported from the generated :mod:`flexq.plugin.published`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# PUBLISHED is generated from the installed first-party formats (flexq.cli.published:
# `python -m flexq.cli.doc_blocks .`), so a new format package writes no line here.
from flexq.plugin.published import DISTRIBUTIONS, PUBLISHED

__all__ = ["FIRST_PARTY", "PUBLISHED", "config_methods", "install_hint"]

#: The distributions this workspace ships: when another distribution offers a format
#: of the same name, the registry keeps these (a name clash never disables flexq's own).
FIRST_PARTY: frozenset[str] = DISTRIBUTIONS


def install_hint(dist: str) -> str:
    """How to install first-party distribution ``dist`` (``flexq-format-gptq``), for
    error messages: flexq is not on the package index yet, so the hint names the
    package directory of a flexq source checkout as well."""
    where = "packages/core" if dist == "flexq" else f"packages/{dist.removeprefix('flexq-')}"
    return f"install {dist} (from a flexq source checkout: pip install -e {where})"


def config_methods(qc: Mapping[str, Any], where: str = "quantization_config") -> set[str]:
    """The methods a ``quantization_config`` names, spelled as formats claim them.

    ``{"quant_method": "gptq"}`` -> ``{"gptq"}``; compressed-tensors configs give
    ``"compressed-tensors/<format>"`` for each format of quantized weights the config
    declares (the one rule of :class:`~flexq.quantconfig.compressed_tensors.CtConfig`:
    ``dense`` weights need no decoder), or ``{"compressed-tensors"}`` when none is named.

    :param where: the file and field, for the error on a malformed compressed-tensors config.
    :raises FormatError: when a compressed-tensors config is malformed.
    """
    method = qc.get("quant_method")
    if not isinstance(method, str) or not method:
        return set()
    method = method.lower()
    if method != "compressed-tensors":
        return {method}
    # Imported here: the model is pydantic's, which a load of any other method need not pay for.
    from flexq.quantconfig.compressed_tensors import parse_compressed_tensors

    config = parse_compressed_tensors(qc, where, "flexq's format detection")
    if not config.declared_formats:
        return {method}
    return {f"{method}/{f}" for f in config.quantized_formats}
