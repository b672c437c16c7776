"""Write safetensors checkpoints with any dtype string, for encoders, convert, the demo and tests.

The bytes are laid out by the ``safetensors`` library itself (its
``serialize_file`` with ``TensorSpec``, which knows F8_E4M3, F8_E8M0, F4, BF16
...); this module only maps flexq's storage arrays onto it and splits a
checkpoint into shards with a ``model.safetensors.index.json``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors import SafetensorError, TensorSpec, serialize_file

from flexq.io.dtypes import BY_NUMPY, dtype

if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True)
class RawTensor:
    """A tensor as stored: safetensors ``dtype`` string + array in the reader's storage layout.

    F8/E8M0 data is uint8, BF16 is uint16 bits, F4 is uint8 with two elements
    per byte (low nibble first) and the last dimension halved.
    """

    dtype: str
    data: np.ndarray

    def __post_init__(self) -> None:
        want = dtype(self.dtype).numpy
        if self.data.dtype != want:
            raise ValueError(f"{self.dtype} data must be stored as {want}, got {self.data.dtype}")

    @classmethod
    def of(cls, array: np.ndarray) -> RawTensor:
        """Wrap a plain numpy array (float32, float16, int32, uint8, ...)."""
        try:
            return cls(BY_NUMPY[array.dtype].name, array)
        except KeyError:
            raise ValueError(f"no safetensors dtype holds numpy {array.dtype}") from None


def save_file(
    tensors: Mapping[str, RawTensor], path: str | os.PathLike[str], metadata: dict[str, str] | None
) -> None:
    """Write ``tensors`` to one safetensors file at ``path``."""
    # np.require, not ascontiguousarray: the latter turns 0-d scales into shape (1,).
    arrays = {k: np.require(t.data, requirements="C") for k, t in tensors.items()}
    specs = {
        k: TensorSpec(
            dtype=_spec_name(t.dtype),
            shape=list(arrays[k].shape),
            data_ptr=arrays[k].ctypes.data,
            data_len=arrays[k].nbytes,
        )
        for k, t in tensors.items()
    }
    # `arrays` keeps every buffer alive until serialize_file returns.
    try:
        serialize_file(specs, os.fspath(path), metadata or {"format": "pt"})
    except SafetensorError as exc:
        # The library reports the OS's write errors (disk full, file too large) as its
        # own error with the errno in the text: raise them as the OSError they are.
        found = _OS_ERROR.search(str(exc))
        if found is None:
            raise
        code = int(found[1])
        raise OSError(code, os.strerror(code), os.fspath(path)) from exc
    # safetensors creates its files 0600; give them the umask's mode like any other file.
    os.chmod(path, 0o666 & ~_umask())


#: How safetensors' messages give the errno of an OS error ("... (os error 28)").
_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _spec_name(name: str) -> str:
    spec = dtype(name).spec
    if spec is None:
        raise ValueError(f"flexq cannot write {name} tensors")
    return spec


def save_checkpoint(
    directory: str | os.PathLike[str],
    tensors: Mapping[str, RawTensor],
    *,
    config: Mapping[str, Any] | None = None,
    shard_of: Mapping[str, int] | None = None,
    max_shard_bytes: int | None = None,
) -> Path:
    """Write an HF-style checkpoint directory (created if missing).

    :param shard_of: put tensor key in shard number N (0-based); others in shard 0.
    :param max_shard_bytes: start a new shard when this size would be exceeded.
    One shard gives ``model.safetensors``; several give
    ``model-0000i-of-0000n.safetensors`` and ``model.safetensors.index.json``.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, RawTensor]] = [{}]
    sizes = [0]
    for key, t in tensors.items():
        if shard_of is not None:
            n = shard_of.get(key, 0)
            while len(shards) <= n:
                shards.append({})
                sizes.append(0)
        else:
            n = len(shards) - 1
            if max_shard_bytes and sizes[n] and sizes[n] + t.data.nbytes > max_shard_bytes:
                shards.append({})
                sizes.append(0)
                n += 1
        shards[n][key] = t
        sizes[n] += t.data.nbytes
    if config is not None:
        (out / "config.json").write_text(json.dumps(config, indent=2))
    if len(shards) == 1:
        save_file(shards[0], out / "model.safetensors", None)
        return out
    weight_map = {}
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, out / name, None)
        weight_map.update(dict.fromkeys(shard, name))
    index = {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return out
