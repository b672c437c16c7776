"""The format's identity: its name and the config methods it claims.

Cheap constants, no imports of the modules that do the work: the entry point
(:mod:`flexq_gptq.plugin`) reads them at discovery in every process that uses flexq.
"""

from __future__ import annotations

FORMAT_NAME = "gptq"
#: ``quant_method`` values this format decodes (lower case).
GPTQ_METHODS = ("gptq",)
AUTO_ROUND_METHODS = ("auto-round", "intel/auto-round")
