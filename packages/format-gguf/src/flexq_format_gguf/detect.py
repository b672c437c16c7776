"""Which logical tensors a GGUF checkpoint holds: every GGUF tensor by its HF name.

For the format's plugin; reads metadata and tensor infos only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.errors import FormatError
from flexq.formatkit import Analysis, per_checkpoint
from flexq_format_gguf.checkpoint import GGUFCheckpoint
from flexq_format_gguf.layout import NATURAL, GGUFLayout
from flexq_format_gguf.names import architecture, hf_name

if TYPE_CHECKING:
    from flexq import Checkpoint


@per_checkpoint
def analyze(ckpt: Checkpoint) -> Analysis[GGUFLayout] | None:
    """The logical tensors of a GGUF checkpoint (None for any other checkpoint).

    :raises FormatError: an architecture or tensor name flexq does not map, or two
        GGUF tensors with one HF name.
    """
    if not isinstance(ckpt, GGUFCheckpoint):
        return None
    arch = architecture(ckpt.metadata, ckpt.path)
    tensors: dict[str, GGUFLayout] = {}
    for name, t in ckpt.gguf.items():
        hf = hf_name(name, arch, ckpt.metadata, ckpt.path)
        if hf.name in tensors:
            raise FormatError(f"{ckpt.path}: two GGUF tensors are {hf.name!r}")
        if hf.heads is not None and t.shape[0] % (2 * hf.heads):
            raise FormatError(
                f"{ckpt.path}: tensor {name!r} of {t.shape[0]} rows cannot hold "
                f"{hf.heads} permuted heads"
            )
        dtype = NATURAL.get(t.type.name, "float32")
        tensors[hf.name] = GGUFLayout(t.shape, dtype, (name,), t.type, hf.heads)
    return Analysis(tensors, recognized=frozenset(ckpt.gguf))
