"""GGUF: llama.cpp's model files (one file or a split set), decoded to HF tensors.

The ``gguf`` format (entry point ``flexq_format_gguf.plugin:plugin``): a
:class:`flexq.formatkit.Format` over :mod:`flexq_format_gguf.detect` (names),
:mod:`flexq_format_gguf.layout` (plans and decode of a box), plus the container
hook that opens GGUF paths (:mod:`flexq_format_gguf.checkpoint`).

The entry point imports only this module and :mod:`flexq_format_gguf.identity`: the parts are
``"module:attribute"`` references, imported when a checkpoint of the format is
composed (:class:`flexq.formatkit.Format`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flexq.formatkit.format import Format
from flexq.markers import hookimpl
from flexq_format_gguf.files import gguf_files

if TYPE_CHECKING:
    from flexq import Checkpoint

__all__ = ["FORMAT_NAME", "plugin"]

FORMAT_NAME = "gguf"


class _GGUFFormat(Format[Any]):
    """A Format that also opens GGUF containers."""

    @hookimpl
    def flexq_open_checkpoint(self, path: str) -> Checkpoint | None:
        files = gguf_files(path)
        if files is None:
            return None
        # Asked for every path a load opens: the container code only for GGUF models.
        from flexq_format_gguf.checkpoint import GGUFCheckpoint

        return GGUFCheckpoint(files)


plugin = _GGUFFormat(
    FORMAT_NAME,
    "GGUF: llama.cpp's model files (one file or a split set), decoded to HF tensors.",
    methods=(),
    analyze="flexq_format_gguf.detect:analyze",
    plan="flexq_format_gguf.layout:local_plan",
    decode="flexq_format_gguf.layout:decode",
    api_version="1.2",
)
