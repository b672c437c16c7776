"""The format's identity: its name and the config methods it claims.

Cheap constants, no imports of the modules that do the work: the entry point
(:mod:`flexq_nvfp4.plugin`) reads them at discovery in every process that uses flexq.
"""

from __future__ import annotations

FORMAT = "nvfp4"
CT_FORMAT = "nvfp4-pack-quantized"
