"""The format's identity: its name and the config methods it claims.

Cheap constants, no imports of the modules that do the work: the entry point
(:mod:`flexq_int4_awq.plugin`) reads them at discovery in every process that uses flexq.
"""

from __future__ import annotations

#: the name this format is registered under (entry point ``int4-awq``).
FORMAT_NAME = "int4-awq"
