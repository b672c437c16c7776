"""``flexq convert``: dequantize a quantized checkpoint into a plain HF-style checkpoint.

For users who want a checkpoint any loader reads. Output: logical tensor names,
float tensors in their own dtype (or the one asked), shards plus
``model.safetensors.index.json``, config.json without its quantization section,
and the checkpoint's companions (tokenizer, generation config, chat template;
never other weights). Tensors are converted one at a time and written one shard
at a time, so memory stays near one shard.

Convert never destroys: everything is written into a temporary directory beside
DST and renamed at the end, so DST is either complete or untouched; a DST that
is, holds or lies inside SRC is refused; ``force`` replaces only an empty
directory or one an earlier convert wrote (it carries the :data:`MARKER` file).
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from flexq.compose import ComposedTransform, compose
from flexq.errors import FlexqError
from flexq.io.checkpoint import CONFIG_NAME, Checkpoint
from flexq.io.dtypes import paddle_dtype
from flexq.io.writer import RawTensor, save_file

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
        """Called after each tensor with its output bytes."""


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
    return int(float(m.group(1)) * base**power)


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
    :raises FlexqError: on bad input or a ``dst`` convert may not write; ``dst``
        and ``src`` are then untouched.
    """
    if dtype is not None and dtype not in FLOATS:
        raise FlexqError(f"--dtype must be one of {sorted(FLOATS)}, not {dtype!r}")
    ckpt = src if isinstance(src, Checkpoint) else Checkpoint(src)
    source, target = ckpt.path.resolve(), Path(dst).resolve()
    check_target(source, target, dst, force)  # before anything else can fail
    ct = compose(ckpt, formats, allow_unclaimed=allow_unclaimed)
    _remove_stale(target)
    tmp = target.parent / f".{target.name}{_TMP_MARK}{os.getpid()}"
    tmp.mkdir(parents=True)
    try:
        (tmp / MARKER).write_text(json.dumps({"source": str(source), "dtype": dtype}) + "\n")
        report = _write(ct, tmp, dtype, max_shard_bytes, progress)
        skipped = _copy_companions(source, tmp, dtype)
        _replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
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
    if not force:
        raise FlexqError(f"{dst} exists; pass --force to replace it")
    if not (target / MARKER).is_file():
        raise FlexqError(
            f"{dst} exists and was not written by flexq convert (it has no {MARKER}); "
            "--force replaces only such directories or empty ones"
        )


def _replace(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to ``target``; an old ``target`` is moved aside first, removed last."""
    if not target.exists():
        tmp.rename(target)
        return
    old = target.parent / f".{target.name}{_OLD_MARK}{os.getpid()}"
    target.rename(old)
    try:
        tmp.rename(target)
    except BaseException:
        old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _out_dtype(ct: ComposedTransform, key: str, dtype: str | None) -> str:
    natural = ct.entries[key].dtype
    return dtype if dtype is not None and natural in FLOATS else natural


def _write(
    ct: ComposedTransform,
    out: Path,
    dtype: str | None,
    limit: int,
    progress: ConvertProgress | None,
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
        save_file(tensors, out / name, {"format": "pt"})
        del tensors
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return ConvertReport(len(keys), len(shards), total)


def _raw(ct: ComposedTransform, key: str, out_dtype: str) -> RawTensor:
    values = ct.load(key, out_dtype)  # already rounded once to out_dtype
    st = FLOATS.get(out_dtype)
    return RawTensor(st, values) if st is not None else RawTensor.of(values)


def is_companion(name: str) -> bool:
    """Whether a file of a checkpoint is a companion a plain checkpoint keeps."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in COMPANIONS)


def _copy_companions(source: Path, out: Path, dtype: str | None) -> tuple[str, ...]:
    """config.json without its quantization section, and the other companions; returns
    the names of the other plain files, which are not copied."""
    skipped = []
    for path in sorted(source.iterdir()):
        name = path.name
        if not path.is_file() or name.startswith("."):
            continue
        if not is_companion(name):
            if not name.endswith((".safetensors", ".safetensors.index.json", "quant_config.json")):
                skipped.append(name)
            continue
        if name == CONFIG_NAME:
            config = json.loads(path.read_text())
            for k in _QUANT_KEYS:
                config.pop(k, None)
            if dtype is not None and "torch_dtype" in config:
                config["torch_dtype"] = dtype
            (out / name).write_text(json.dumps(config, indent=2))
        else:
            shutil.copyfile(path, out / name)
    return tuple(skipped)


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
