"""``flexq convert``: dequantize a quantized checkpoint into a plain HF-style checkpoint.

For users who want a checkpoint any loader reads. Output: logical tensor names,
float tensors in one dtype, shards plus ``model.safetensors.index.json``,
config.json without its quantization section, the other small files copied.
Tensors are converted one at a time and written one shard at a time, so memory
stays near one shard. Everything is written into a temporary directory beside
DST and renamed at the end: DST is either complete or absent.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flexq.compose import ComposedTransform, compose
from flexq.errors import FlexqError
from flexq.io.checkpoint import CONFIG_NAME, INDEX_SUFFIX, QUANT_CONFIG_NAME
from flexq.io.dtypes import paddle_dtype
from flexq.io.writer import RawTensor, save_file

FLOATS = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
_QUANT_KEYS = ("quantization_config", "compression_config")
#: Other files larger than this are not copied (they are not tokenizer/config files).
MAX_COPIED_FILE = 64 << 20
_TMP_MARK = ".flexq-tmp-"

Progress = Callable[[str, int], None]


@dataclass(frozen=True)
class ConvertReport:
    """What :func:`convert` wrote."""

    tensors: int
    shards: int
    bytes: int


def parse_size(text: str) -> int:
    """``"5GB"`` / ``"500MB"`` / ``"1024"`` -> bytes (decimal units, as HF uses)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*", text, re.IGNORECASE)
    if m is None:
        raise FlexqError(f"cannot read size {text!r} (use e.g. 5GB, 500MB)")
    base = 1024 if m.group(3) else 1000
    power = " KMGT".index(m.group(2).upper() or " ")
    return int(float(m.group(1)) * base**power)


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    dtype: str = "bfloat16",
    formats: list[str] | None = None,
    max_shard_bytes: int = 5_000_000_000,
    force: bool = False,
    progress: Progress | None = None,
) -> ConvertReport:
    """Write the dequantized checkpoint of ``src`` to ``dst``.

    :param dtype: output dtype of every floating tensor (integer tensors keep theirs).
    :param progress: called with (logical key, output bytes) after each tensor.
    :raises FlexqError: on bad input, an existing ``dst`` without ``force``, or
        ``dst`` inside ``src``; ``dst`` is then untouched.
    """
    if dtype not in FLOATS:
        raise FlexqError(f"--dtype must be one of {sorted(FLOATS)}, not {dtype!r}")
    ct = compose(src, formats)
    source, target = ct.checkpoint.path.resolve(), Path(dst).resolve()
    if target == source or source in target.parents:
        raise FlexqError(f"{dst}: the output may not be inside the checkpoint {src}")
    if target.exists() and not force:
        raise FlexqError(f"{dst} exists; pass --force to replace it")
    _remove_stale(target)
    tmp = target.parent / f".{target.name}{_TMP_MARK}{os.getpid()}"
    tmp.mkdir(parents=True)
    try:
        report = _write(ct, tmp, dtype, max_shard_bytes, progress)
        _copy_small_files(source, tmp, dtype)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report


def _out_dtype(ct: ComposedTransform, key: str, dtype: str) -> str:
    natural = ct.entries[key].dtype
    return dtype if natural in FLOATS else natural


def _write(
    ct: ComposedTransform, out: Path, dtype: str, limit: int, progress: Progress | None
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
    weight_map = {}
    for name, shard in zip(names, shards, strict=True):
        tensors = {}
        for key in shard:
            tensors[key] = _raw(ct, key, _out_dtype(ct, key, dtype))
            weight_map[key] = name
            if progress is not None:
                progress(key, sizes[key])
        save_file(tensors, out / name, {"format": "pt"})
        del tensors
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
        (out / ("model" + INDEX_SUFFIX)).write_text(json.dumps(index, indent=2))
    return ConvertReport(len(keys), len(shards), sum(sizes.values()))


def _raw(ct: ComposedTransform, key: str, out_dtype: str) -> RawTensor:
    values = ct.load(key, out_dtype)  # already rounded once to out_dtype
    st = FLOATS.get(out_dtype)
    return RawTensor(st, values) if st is not None else RawTensor.of(values)


def _copy_small_files(source: Path, out: Path, dtype: str) -> None:
    """config.json without its quantization section, and the other small plain files."""
    for path in sorted(source.iterdir()):
        name = path.name
        if (
            not path.is_file()
            or name.endswith((".safetensors", INDEX_SUFFIX))
            or name == QUANT_CONFIG_NAME
            or name.startswith(".")
            or path.stat().st_size > MAX_COPIED_FILE
        ):
            continue
        if name == CONFIG_NAME:
            config = json.loads(path.read_text())
            for k in _QUANT_KEYS:
                config.pop(k, None)
            if "torch_dtype" in config:
                config["torch_dtype"] = dtype
            (out / name).write_text(json.dumps(config, indent=2))
        else:
            shutil.copyfile(path, out / name)


def _remove_stale(target: Path) -> None:
    """Delete temporary directories of earlier converts to ``target`` that were killed."""
    for stale in target.parent.glob(f".{target.name}{_TMP_MARK}*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
