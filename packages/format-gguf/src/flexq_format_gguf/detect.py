"""Which logical tensors a GGUF checkpoint holds: every GGUF tensor by its HF name.

For the format's plugin; reads metadata and tensor infos only. A logical tensor is
one GGUF tensor, or (llama.cpp's merged gate and up experts) the GGUF tensors stacked
into one HF tensor, which must all be there with one shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexq.errors import FormatError
from flexq.formatkit import Analysis, cached_per_checkpoint
from flexq_format_gguf.checkpoint import GGUFCheckpoint, blocks_view
from flexq_format_gguf.layout import NATURAL, STACK_AXIS, GGUFLayout, Part
from flexq_format_gguf.names import HFName, architecture, hf_name

if TYPE_CHECKING:
    from flexq import Checkpoint


@cached_per_checkpoint
def analyze(ckpt: Checkpoint) -> Analysis[GGUFLayout] | None:
    """The logical tensors of a GGUF checkpoint (None for any other checkpoint).

    :raises FormatError: an architecture or tensor name flexq does not map, two GGUF
        tensors with one HF name, or stacked experts with a part missing or misshapen.
    """
    if not isinstance(ckpt, GGUFCheckpoint):
        return None
    arch = architecture(ckpt.metadata, ckpt.path)
    found: dict[str, dict[int, tuple[str, HFName]]] = {}
    for name, t in ckpt.gguf.items():
        if name in ckpt.derived:
            continue
        hf = hf_name(name, arch, ckpt.metadata, ckpt.path)
        if hf.part in found.setdefault(hf.name, {}):
            raise FormatError(f"{ckpt.path}: two GGUF tensors are {hf.name!r}")
        if hf.heads is not None and t.shape[0] % (2 * hf.heads):
            raise FormatError(
                f"{ckpt.path}: tensor {name!r} of {t.shape[0]} rows cannot hold "
                f"{hf.heads} permuted heads"
            )
        found[hf.name][hf.part] = (name, hf)
    tensors = {key: _layout(ckpt, key, parts) for key, parts in found.items()}
    return Analysis(tensors, recognized=frozenset(ckpt.tensors))


def _layout(ckpt: GGUFCheckpoint, key: str, parts: dict[int, tuple[str, HFName]]) -> GGUFLayout:
    count = next(iter(parts.values()))[1].of
    names = [parts[i][0] if i in parts else None for i in range(count)]
    if None in names:
        have = ", ".join(repr(n) for n in names if n is not None)
        raise FormatError(
            f"{ckpt.path}: {key!r} stacks {count} GGUF tensors and the file has only {have} "
            "(a file cut short or written by another tool?)"
        )
    shapes = {ckpt.gguf[n].shape for n in names if n is not None}
    if len(shapes) != 1:
        raise FormatError(
            f"{ckpt.path}: {key!r} stacks {names} of shapes {sorted(shapes)}; they must agree"
        )
    shape = list(shapes.pop())
    shape[STACK_AXIS if count > 1 else 0] *= count
    first = next(iter(parts.values()))[1]
    built = tuple(_part(ckpt, n) for n in names if n is not None)
    types = {p.type.name for p in built}
    dtype = NATURAL.get(types.pop(), "float32") if len(types) == 1 else "float32"
    return GGUFLayout(
        key, (1,) * first.unsqueeze + tuple(shape), dtype, built, first.heads, first.unsqueeze
    )


def _part(ckpt: GGUFCheckpoint, name: str) -> Part:
    t = ckpt.gguf[name]
    return Part(name, t.shape, t.type, None if t.type.plain else blocks_view(name))
