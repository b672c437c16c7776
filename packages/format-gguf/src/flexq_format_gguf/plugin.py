"""GGUF: llama.cpp's model files (one file or a split set), decoded to HF tensors.

The ``gguf`` format (entry point ``flexq_format_gguf.plugin:plugin``): a
:class:`flexq.formatkit.Format` over :mod:`flexq_format_gguf.detect` (names),
:mod:`flexq_format_gguf.layout` (plans and decode of a box), plus the container
hook that opens GGUF paths (:mod:`flexq_format_gguf.checkpoint`).
"""

from __future__ import annotations

from flexq import Checkpoint, hookimpl
from flexq.formatkit import Format
from flexq_format_gguf.checkpoint import GGUFCheckpoint, gguf_files
from flexq_format_gguf.detect import analyze
from flexq_format_gguf.layout import GGUFLayout, decode_box, local_plan

__all__ = ["FORMAT_NAME", "plugin"]

FORMAT_NAME = "gguf"


class _GGUFFormat(Format[GGUFLayout]):
    """A Format that also opens GGUF containers."""

    @hookimpl
    def flexq_open_checkpoint(self, path: str) -> Checkpoint | None:
        files = gguf_files(path)
        return GGUFCheckpoint(files) if files is not None else None


plugin = _GGUFFormat(
    FORMAT_NAME,
    "GGUF: llama.cpp's model files (one file or a split set), decoded to HF tensors.",
    methods=(),
    analyze=analyze,
    plan=local_plan,
    decode=decode_box,
    api_version="1.0",
)
