"""``flexq convert``: dequantize a quantized checkpoint into a plain HF-style checkpoint.

For users who want a checkpoint any loader reads. Output: logical tensor names,
float tensors in their own dtype (or the one asked), shards plus
``model.safetensors.index.json``, config.json without its quantization section,
and the checkpoint's companions (tokenizer, generation config, chat template;
never other weights). Tensors are converted one at a time and written one shard
at a time, so memory stays near one shard.

Convert never destroys: everything is written into a temporary directory beside
DST and renamed at the end, so DST is either complete or untouched (also when
interrupted: the rename is never cut in half, and a failed or interrupted
convert removes its temporary directory); a DST that is, holds or lies inside
SRC is refused; ``force`` replaces only an empty directory or one an earlier
convert wrote (it carries the :data:`MARKER` file). A write that fails (disk
full, file too large, no permission) is a :class:`FlexqError` naming the file.
Companions are copied only from inside SRC: one that is a link leading out of
it (or, for a Hugging Face cache snapshot, out of its ``models--*`` tree) is
refused before anything is written, as the checkpoint's own files are.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import math
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from flexq.compose import composition_of
from flexq.errors import CheckpointError, FlexqError
from flexq.interrupts import uninterrupted
from flexq.io.checkpoint import CONFIG_NAME, Checkpoint
from flexq.io.dtypes import paddle_dtype
from flexq.io.hub import PREFERRED_INDEX, locate
from flexq.io.writer import RawTensor, save_file
from flexq.plugin.manager import open_checkpoint
from flexq.polling import polled

if TYPE_CHECKING:
    from collections.abc import Iterator

    from flexq.composition import Composition

FLOATS = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
_QUANT_KEYS = ("quantization_config", "compression_config")
#: Written into every output directory; ``force`` replaces only directories that have it.
MARKER = ".flexq-convert"
_TMP_MARK = ".flexq-tmp-"
_OLD_MARK = ".flexq-old-"
#: The files beside the weights that a plain checkpoint keeps (HF's own names).
COMPANIONS = (
    CONFIG_NAME,
    "generation_config.json",
    "tokenizer*.json",
    "tokenizer*.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "sentencepiece*.model",
    "*.tiktoken",
    "chat_template.json",
    "chat_template.jinja",
    "preprocessor_config.json",
    "processor_config.json",
    "LICENSE*",
    "NOTICE*",
)


class ConvertProgress(Protocol):
    """What :func:`convert` reports as it goes (the CLI draws a bar in bytes)."""

    def start(self, total_bytes: int, tensors: int) -> None:
        """Called once, before the first tensor, with the output's size."""

    def advance(self, key: str, nbytes: int) -> None:
        """Called after each tensor is decoded, with its output bytes."""

    def wrote(self, nbytes: int) -> None:
        """Called, from a watcher thread too, as shard files grow on disk: the tensor
        bytes written since the last call (all calls add up to the output's size)."""

    def done(self) -> None:
        """Called once DST is complete (renamed into place), with SIGINT and SIGTERM
        held off: whatever it does about signals holds from then on (the CLI ignores
        them, so an interrupt cannot make it report a removal that did not happen)."""


@dataclass(frozen=True)
class ConvertReport:
    """What :func:`convert` wrote.

    :ivar skipped: files of SRC that were not copied (not weights flexq writes and
        not checkpoint companions, e.g. ``pytorch_model.bin``).
    """

    tensors: int
    shards: int
    bytes: int
    skipped: tuple[str, ...] = ()


def parse_size(text: str) -> int:
    """``"5GB"`` / ``"500MB"`` / ``"1024"`` -> bytes (decimal units, as HF uses)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*", text, re.IGNORECASE)
    if m is None:
        raise FlexqError(f"cannot read size {text!r} (use e.g. 5GB, 500MB)")
    base = 1024 if m.group(3) else 1000
    power = " KMGT".index(m.group(2).upper() or " ")
    size = int(float(m.group(1)) * base**power)
    if size < 1:
        raise FlexqError(f"size {text!r} is not a positive number of bytes (use e.g. 5GB, 500MB)")
    return size


def convert(
    src: str | os.PathLike[str] | Checkpoint,
    dst: str | os.PathLike[str],
    *,
    dtype: str | None = None,
    formats: list[str] | None = None,
    max_shard_bytes: int = 5_000_000_000,
    force: bool = False,
    allow_unclaimed: bool = False,
    progress: ConvertProgress | None = None,
) -> ConvertReport:
    """Write the dequantized checkpoint of ``src`` to ``dst``.

    :param dtype: output dtype of every floating tensor (integer tensors keep
        theirs); None keeps each tensor's own dtype (the checkpoint's, e.g.
        float16 for AWQ).
    :param force: replace an existing ``dst`` that is empty or an earlier output.
    :param allow_unclaimed: pass through tensors that look quantized (see
        :func:`flexq.compose`).
    :raises FlexqError: on bad input, a ``dst`` convert may not write, or a write
        that fails (disk full, file too large, no permission); ``dst`` and ``src``
        are then untouched. Interrupted (KeyboardInterrupt), ``dst`` is untouched
        too, or complete when the interrupt came while it was being renamed into place.
    """
    if dtype is not None and dtype not in FLOATS:
        raise FlexqError(f"--dtype must be one of {sorted(FLOATS)}, not {dtype!r}")
    ckpt = src if isinstance(src, Checkpoint) else open_checkpoint(src)
    source, target = ckpt.path.resolve(), Path(dst).resolve()
    check_target(source, target, dst, force)  # before anything else can fail
    ct = composition_of(ckpt, formats, allow_unclaimed=allow_unclaimed)
    # A container file (GGUF) has no companions beside it that are its own.
    companions, skipped = _companions(ckpt.path) if ckpt.path.is_dir() else ({}, ())
    _remove_stale(target)
    tmp = target.parent / f".{target.name}{_TMP_MARK}{os.getpid()}"
    old: Path | None = None
    try:
        with _writing(dst, "its temporary directory"):
            tmp.mkdir(parents=True)
        with _writing(dst, MARKER):
            (tmp / MARKER).write_text(json.dumps({"source": str(source), "dtype": dtype}) + "\n")
        report = _write(ct, tmp, dtype, max_shard_bytes, progress, dst)
        for name, path in companions.items():
            with _writing(dst, name):
                _copy_companion(name, path, tmp, dtype)
        if CONFIG_NAME not in companions and ckpt.config:
            # The config a container format built from its metadata (GGUF).
            with _writing(dst, CONFIG_NAME):
                _write_config(dict(ckpt.config), tmp, dtype)
        with uninterrupted():  # renamed in whole or not at all, even on Ctrl-C
            old = _replace(tmp, target)
            if progress is not None:
                progress.done()
    except BaseException:
        # (Nothing to remove once renamed: an interrupt held off during the rename comes here.)
        with uninterrupted():  # a second Ctrl-C must not leave half of it behind
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:  # the output DST replaced (a convert killed now: the next one)
            shutil.rmtree(old, ignore_errors=True)
    return ConvertReport(report.tensors, report.shards, report.bytes, skipped)


def check_target(source: Path, target: Path, dst: object, force: bool) -> None:
    """Refuse every DST whose replacement could delete something convert did not write."""
    if target == source:
        raise FlexqError(f"{dst}: DST is the checkpoint itself; choose another directory")
    if source in target.parents:
        raise FlexqError(
            f"{dst}: DST is inside the checkpoint {source}; choose a directory outside it"
        )
    if target in source.parents:
        raise FlexqError(
            f"{dst}: DST contains the checkpoint {source}; replacing it would delete the "
            "checkpoint (choose a new directory)"
        )
    for parent in target.parents:
        if parent.exists() and not parent.is_dir():
            raise FlexqError(f"{dst}: {parent} is a file, so DST cannot be created")
    if not target.exists():
        return
    if not target.is_dir():
        raise FlexqError(f"{dst}: DST is a file, not a directory; remove it or choose another")
    if not any(target.iterdir()):
        return  # an empty directory: nothing to lose
    # Whose directory it is decides, with or without --force: the user learns in one
    # round trip whether --force would help.
    if not (target / MARKER).is_file():
        raise FlexqError(
            f"{dst} exists and was not written by flexq convert (it has no {MARKER}), "
            "so flexq will not replace it, even with --force: choose another DST or "
            "empty it yourself"
        )
    if not force:
        raise FlexqError(
            f"{dst} exists; pass --force to replace it (an earlier flexq convert wrote it: "
            f"it has {MARKER})"
        )


def _replace(tmp: Path, target: Path) -> Path | None:
    """Rename ``tmp`` to ``target``; an old ``target`` is moved aside first and returned
    (for the caller to remove once the new one is in place)."""
    if not target.exists():
        tmp.rename(target)
        return None
    old = target.parent / f".{target.name}{_OLD_MARK}{os.getpid()}"
    target.rename(old)
    try:
        tmp.rename(target)
    except BaseException:
        old.rename(target)
        raise
    return old


#: What to do about the OS errors a full or capped file system gives.
_WRITE_HINTS = {
    errno.ENOSPC: "free space on DST's file system, or choose a DST on another one",
    errno.EDQUOT: "free space within your disk quota, or choose a DST on another file system",
    errno.EFBIG: "a smaller --max-shard-size keeps every file under the size limit",
}


#: How often the writer's file is measured while safetensors writes it (one call, in Rust).
_WATCH_SECONDS = 0.2


@contextmanager
def _growing(path: Path, nbytes: int, progress: ConvertProgress | None) -> Iterator[None]:
    """Report ``path``'s growth to ``progress`` while the block writes its ``nbytes``
    tensor bytes (the header, a few KB, is not counted), and the rest once it is done."""
    if progress is None:
        yield
        return
    told = 0

    def tick() -> None:
        nonlocal told
        try:
            size = min(path.stat().st_size, nbytes)
        except FileNotFoundError:
            return
        if size > told:
            progress.wrote(size - told)
            told = size

    with polled(tick, _WATCH_SECONDS, "flexq-convert-progress"):
        yield
    progress.wrote(nbytes - told)


@contextmanager
def _writing(dst: object, name: str) -> Iterator[None]:
    """Turn an OS error while writing ``name`` into DST's temporary directory into a
    one-line :class:`FlexqError` naming DST and the file (the caller then removes
    the temporary directory)."""
    try:
        yield
    except OSError as exc:
        why = exc.strerror or str(exc)
        hint = _WRITE_HINTS.get(exc.errno or 0)
        raise FlexqError(
            f"{dst}: writing {name} failed: {why}; the partial output was removed"
            + (f" ({hint})" if hint else "")
        ) from exc


def _out_dtype(ct: Composition, key: str, dtype: str | None) -> str:
    natural = ct.entries[key].dtype
    return dtype if dtype is not None and natural in FLOATS else natural


def _write(
    ct: Composition,
    out: Path,
    dtype: str | None,
    limit: int,
    progress: ConvertProgress | None,
    dst: object,
) -> ConvertReport:
    keys = sorted(ct.entries)
    sizes = {
        key: paddle_dtype(_out_dtype(ct, key, dtype)).itemsize * math.prod(ct.entries[key].shape)
        for key in keys
    }
    shards: list[list[str]] = [[]]
    used = 0
    for key in keys:
        if shards[-1] and used + sizes[key] > limit:
            shards.append([])
            used = 0
        shards[-1].append(key)
        used += sizes[key]
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    total = sum(sizes.values())
    if progress is not None:
        progress.start(total, len(keys))
    weight_map = {}
    for name, shard in zip(names, shards, strict=True):
        tensors = {}
        for key in shard:
            tensors[key] = _raw(ct, key, _out_dtype(ct, key, dtype))
            weight_map[key] = name
            if progress is not None:
                progress.advance(key, sizes[key])
        with _writing(dst, name), _growing(out / name, sum(sizes[k] for k in shard), progress):
            save_file(tensors, out / name, {"format": "pt"})
        del tensors
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        with _writing(dst, PREFERRED_INDEX):
            (out / PREFERRED_INDEX).write_text(json.dumps(index, indent=2))
    return ConvertReport(len(keys), len(shards), total)


def _raw(ct: Composition, key: str, out_dtype: str) -> RawTensor:
    values = ct.load(key, out_dtype)  # already rounded once to out_dtype
    st = FLOATS.get(out_dtype)
    return RawTensor(st, values) if st is not None else RawTensor.of(values)


def is_companion(name: str) -> bool:
    """Whether a file of a checkpoint is a companion a plain checkpoint keeps."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in COMPANIONS)


def _companions(directory: Path) -> tuple[dict[str, Path], tuple[str, ...]]:
    """The companions of the checkpoint at ``directory`` (name -> the file to copy,
    every link resolved and checked to stay inside the checkpoint, as its own files
    are: :meth:`flexq.io.hub.Files.safe_path`), and the names of the other plain
    files, which are not copied.

    :raises CheckpointError: when a companion leads out of the checkpoint.
    """
    files = locate(directory)
    companions: dict[str, Path] = {}
    skipped = []
    for path in sorted(files.path.iterdir()):
        name = path.name
        if not path.is_file() or name.startswith("."):
            continue
        if not is_companion(name):
            if not name.endswith((".safetensors", ".safetensors.index.json", "quant_config.json")):
                skipped.append(name)
            continue
        try:
            companions[name] = files.safe_path(name)
        except CheckpointError as exc:
            raise CheckpointError(
                f"{exc}; convert copies companions only from inside the checkpoint "
                "(copy the file into it, or remove the link)"
            ) from None
    return companions, tuple(skipped)


def _copy_companion(name: str, path: Path, out: Path, dtype: str | None) -> None:
    """Copy one companion into ``out``: config.json without its quantization section."""
    if name == CONFIG_NAME:
        _write_config(json.loads(path.read_text()), out, dtype)
    else:
        shutil.copyfile(path, out / name)


def _write_config(config: dict[str, Any], out: Path, dtype: str | None) -> None:
    """Write ``config`` as ``out``/config.json without its quantization section."""
    for k in _QUANT_KEYS:
        config.pop(k, None)
    if dtype is not None and "torch_dtype" in config:
        config["torch_dtype"] = dtype
    (out / CONFIG_NAME).write_text(json.dumps(config, indent=2))


def _remove_stale(target: Path) -> None:
    """Clean up after earlier converts to ``target`` that were killed: delete their
    temporary directories, and put back an old output one was replacing."""
    for mark in (_OLD_MARK, _TMP_MARK):
        for stale in target.parent.glob(f".{target.name}{mark}*"):
            pid = stale.name.rsplit("-", 1)[-1]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            if mark == _OLD_MARK and not target.exists():
                stale.rename(target)
            else:
                shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
