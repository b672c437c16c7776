"""Which files make one GGUF model (one file or a llama.cpp split set).

For the format's ``flexq_open_checkpoint`` hook, asked for every path a load opens:
this module is cheap to import (no header parsing), so a safetensors load does not
pay for the GGUF container code.
"""

from __future__ import annotations

import re
from pathlib import Path

from flexq.errors import CheckpointError

SUFFIX = ".gguf"
#: llama.cpp's split-set names: ``name-00001-of-00003.gguf``.
SPLIT = re.compile(r"(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")


def gguf_files(path: str) -> list[Path] | None:
    """The files of the GGUF model ``path`` names, first first; None when it names none.

    ``path`` may be a ``.gguf`` file, the first file of a split set, or a directory
    holding exactly one GGUF model (and no safetensors checkpoint).

    :raises CheckpointError: a later file of a split set, a split set with files
        missing, or a directory holding several GGUF models.
    """
    p = Path(path)
    if p.is_file() and p.name.endswith(SUFFIX):
        return _model_files(p)
    if not p.is_dir() or any(p.glob("*.safetensors")):
        return None
    firsts = sorted(
        f for f in p.glob(f"*{SUFFIX}")
        if f.is_file() and ((m := SPLIT.fullmatch(f.name)) is None or int(m["no"]) == 1)
    )  # fmt: skip
    if not firsts:
        return None
    if len(firsts) > 1:
        names = ", ".join(f.name for f in firsts)
        raise CheckpointError(f"{p}: holds {len(firsts)} GGUF models ({names}); pass the file")
    return _model_files(firsts[0])


def _model_files(first: Path) -> list[Path]:
    m = SPLIT.fullmatch(first.name)
    if m is None:
        return [first]
    if int(m["no"]) != 1:
        raise CheckpointError(
            f"{first}: is file {int(m['no'])} of a split set; pass the first "
            f"({m['stem']}-00001-of-{m['count']}{SUFFIX})"
        )
    count = int(m["count"])
    files = [
        first.with_name(f"{m['stem']}-{i:05d}-of-{m['count']}{SUFFIX}") for i in range(1, count + 1)
    ]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise CheckpointError(f"{first}: split set of {count} files lacks {', '.join(missing)}")
    return files
