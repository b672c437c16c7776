"""flexq format plugin for AMD Quark safetensors exports (``quant_method: "quark"``).

See :mod:`flexq_format_quark.plugin` for what it decodes and
:mod:`flexq_format_quark.layout` for the on-disk facts.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
