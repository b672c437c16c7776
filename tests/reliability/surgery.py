"""Build small valid checkpoints of every format and damage them in precise ways.

For the reliability catalogue (tests/test_reliability.py) and the fuzz tests:
each builder writes a tiny checkpoint with the format's own encoder; each
surgery helper rewrites one file of it (header, data, index, config) the way a
bad download, a buggy producer or a hostile file would.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

import flexq
from flexq.formatkit.rounding import float32_to_bfloat16_bits
from flexq.io.writer import save_file
from flexq_fp8.encode import save_fp8_checkpoint
from flexq_gptq import quantization_config as gptq_config
from flexq_gptq import quantize as gptq_quantize
from flexq_int4_awq.encode import quantization_config
from flexq_int4_awq.encode import quantize as awq_quantize
from flexq_mxfp4.encode import quantize as mx_quantize
from flexq_nvfp4.encode import CT_NVFP4_CONFIG
from flexq_nvfp4.encode import quantize as nv_quantize

NORM = "model.norm.weight"
FP8_KEYS = ("model.a.weight", "model.b.weight")
MX_KEY = "model.experts.gate_up_proj"
AWQ_PREFIX = "model.q_proj"
GPTQ_PREFIX = "model.k_proj"
#: Two linears each of NVFP4 and GPTQ: the catalogue damages the second, so a load
#: that checks only while decoding has written the first.
NV_KEYS = ("model.a.weight", "model.b.weight")
GPTQ_PREFIXES = ("model.k_proj", "model.v_proj")
FAULTY_KEYS = ("model.x.weight", "model.y.weight")
#: The GGUF model's file and its two linears (Q8_0, then Q4_K: the catalogue damages the second).
GGUF_FILE = "model.gguf"
GGUF_KEYS = ("blk.0.ffn_up.weight", "blk.0.ffn_down.weight")


def _rng() -> np.random.Generator:
    return np.random.default_rng(7)


def norm() -> flexq.RawTensor:
    return flexq.RawTensor(
        "BF16",
        float32_to_bfloat16_bits(np.linspace(0.5, 1.5, 64, dtype=np.float32)),
    )


def fp8(path: Path, *, sharded: bool = False) -> Path:
    """Two block-FP8 linears (blocks of 32) and a BF16 norm; sharded puts b and norm in shard 2."""
    rng = _rng()
    weights = {
        FP8_KEYS[0]: rng.standard_normal((64, 64)).astype(np.float32) * 0.05,
        FP8_KEYS[1]: rng.standard_normal((96, 64)).astype(np.float32) * 0.05,
    }
    shard_of = None
    if sharded:
        shard_of = {FP8_KEYS[1]: 1, FP8_KEYS[1] + "_scale_inv": 1, NORM: 1}
    return save_fp8_checkpoint(
        path,
        weights,
        layout="block",
        block_size=(32, 32),
        others={NORM: norm()},
        shard_of=shard_of,
    )


def mxfp4(path: Path) -> Path:
    """One gpt-oss MXFP4 expert tensor [E=2, in=64, out=8] and a BF16 norm."""
    w = _rng().standard_normal((2, 64, 8)).astype(np.float32)
    return flexq.save_checkpoint(path, {**mx_quantize({MX_KEY: w}), NORM: norm()})


def awq(path: Path) -> Path:
    """One AWQ GEMM linear [64, 64] with groups of 32 and a BF16 norm."""
    w = _rng().standard_normal((64, 64)).astype(np.float32) * 0.05
    tensors = {**awq_quantize(w, 32, prefix=AWQ_PREFIX), NORM: norm()}
    return flexq.save_checkpoint(
        path, tensors, config={"quantization_config": quantization_config(32)}
    )


def gptq(path: Path) -> Path:
    """One 4-bit GPTQ linear [64, 64], groups of 32 in act-order, v1 zeros, and a BF16 norm."""
    rng = _rng()
    w = rng.standard_normal((64, 64)).astype(np.float32) * 0.05
    tensors = {
        **gptq_quantize(w, 4, 32, perm=rng.permutation(64), prefix=GPTQ_PREFIX),
        NORM: norm(),
    }
    config = {"quantization_config": gptq_config(4, 32, desc_act=True)}
    return flexq.save_checkpoint(path, tensors, config=config)


def nvfp4(path: Path) -> Path:
    """Two compressed-tensors NVFP4 linears [64, 64] and [96, 64] and a BF16 norm."""
    rng = _rng()
    weights = {
        NV_KEYS[0]: rng.standard_normal((64, 64)).astype(np.float32) * 0.05,
        NV_KEYS[1]: rng.standard_normal((96, 64)).astype(np.float32) * 0.05,
    }
    tensors = {**nv_quantize(weights), NORM: norm()}
    return flexq.save_checkpoint(path, tensors, config={"quantization_config": CT_NVFP4_CONFIG})


def gptq2(path: Path) -> Path:
    """Two 4-bit GPTQ linears [64, 64] in act-order with groups of 32, and a BF16 norm."""
    rng = _rng()
    tensors = {NORM: norm()}
    for prefix in GPTQ_PREFIXES:
        w = rng.standard_normal((64, 64)).astype(np.float32) * 0.05
        tensors.update(gptq_quantize(w, 4, 32, perm=rng.permutation(64), prefix=prefix))
    config = {"quantization_config": gptq_config(4, 32, desc_act=True)}
    return flexq.save_checkpoint(path, tensors, config=config)


def gguf_model(path: Path) -> Path:
    """A llama GGUF model (gguf-py's writer) in ``path``/model.gguf: a Q8_0 linear [64, 256]
    (gguf-py's quantizer), then a Q4_K linear [64, 256] (random blocks with finite
    scales: gguf-py has no K-quant quantizer) and an F32 norm."""
    import gguf

    rng = _rng()
    path.mkdir(parents=True)
    w = gguf.GGUFWriter(str(path / GGUF_FILE), "llama")
    w.add_block_count(1)
    up = rng.standard_normal((64, 256)).astype(np.float32) * 0.05
    q8 = gguf.GGMLQuantizationType.Q8_0
    w.add_tensor(GGUF_KEYS[0], gguf.quants.quantize(up, q8), raw_dtype=q8)
    blocks = rng.integers(0, 256, (64, 144), dtype=np.uint8)
    halves = (rng.standard_normal((64, 2)) / 128).astype(np.float16)
    blocks[:, :4] = halves.view(np.uint8)
    w.add_tensor(GGUF_KEYS[1], blocks, raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    w.add_tensor("output_norm.weight", np.linspace(0.5, 1.5, 256, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def faulty(path: Path) -> Path:
    """Two tensors of the faulty example format (``.fq`` int8 + ``.fs`` row scales)."""
    rng = _rng()
    tensors = {NORM: norm()}
    for key in FAULTY_KEYS:
        base = key.removesuffix(".weight")
        tensors[base + ".fq"] = flexq.RawTensor.of(rng.integers(-127, 128, (8, 16), dtype=np.int8))
        tensors[base + ".fs"] = flexq.RawTensor.of(np.full(8, 0.01, np.float32))
    return flexq.save_checkpoint(path, tensors)


BUILDERS = {"fp8": fp8, "mxfp4": mxfp4, "int4-awq": awq, "gptq": gptq}
#: Builders only the catalogue uses (the fuzz tests run over :data:`BUILDERS`).
CATALOGUE_BUILDERS = {**BUILDERS, "nvfp4": nvfp4, "gptq2": gptq2, "gguf": gguf_model}


# -- whole files ---------------------------------------------------------------
def data_files(ckpt: Path) -> list[Path]:
    return sorted(ckpt.glob("*.safetensors"))


def file_of(ckpt: Path, key: str) -> Path:
    """The safetensors file holding tensor ``key``."""
    index = ckpt / "model.safetensors.index.json"
    if index.exists():
        return ckpt / str(json.loads(index.read_text())["weight_map"][key])
    return ckpt / "model.safetensors"


def read_raw(file: Path) -> tuple[dict[str, object], bytes]:
    """(header dict, data buffer) of a safetensors file."""
    blob = file.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8 : 8 + n]), blob[8 + n :]


def write_raw(file: Path, header: dict[str, object], data: bytes) -> None:
    raw = json.dumps(header).encode()
    file.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def edit_entry(ckpt: Path, key: str, **fields: object) -> None:
    """Replace fields (dtype, shape, data_offsets) of one header entry, data untouched."""
    file = file_of(ckpt, key)
    header, data = read_raw(file)
    entry = header[key]
    assert isinstance(entry, dict)
    entry.update(fields)
    write_raw(file, header, data)


def entry(ckpt: Path, key: str) -> dict[str, object]:
    header, _ = read_raw(file_of(ckpt, key))
    value = header[key]
    assert isinstance(value, dict)
    return value


def offsets(ckpt: Path, key: str) -> tuple[int, int]:
    """The data_offsets of tensor ``key``."""
    value = entry(ckpt, key)["data_offsets"]
    assert isinstance(value, list)
    return int(value[0]), int(value[1])


def tensors_of(ckpt: Path) -> dict[str, flexq.RawTensor]:
    """Every tensor of a single-file checkpoint, as stored."""
    with flexq.Checkpoint(ckpt) as c:
        return {k: flexq.RawTensor(c.info(k).dtype, c.read(k)) for k in c.tensors}


def rewrite(ckpt: Path, tensors: dict[str, flexq.RawTensor]) -> None:
    """Replace the single data file of ``ckpt`` with ``tensors``."""
    save_file(tensors, ckpt / "model.safetensors", None)


def drop(ckpt: Path, key: str) -> None:
    tensors = tensors_of(ckpt)
    del tensors[key]
    rewrite(ckpt, tensors)


def replace(ckpt: Path, key: str, dtype: str, data: np.ndarray) -> None:
    tensors = tensors_of(ckpt)
    tensors[key] = flexq.RawTensor(dtype, data)
    rewrite(ckpt, tensors)


def set_values(ckpt: Path, key: str, index: tuple[int, ...], value: float | int) -> None:
    """Overwrite one element of tensor ``key`` in place (same dtype, same bytes elsewhere)."""
    tensors = tensors_of(ckpt)
    t = tensors[key]
    data = t.data.copy()
    if t.dtype == "F16":
        data[index] = np.float16(value)
    else:
        data[index] = value
    tensors[key] = flexq.RawTensor(t.dtype, data)
    rewrite(ckpt, tensors)


def edit_json(file: Path, **changes: object) -> None:
    doc = json.loads(file.read_text())
    doc.update(changes)
    file.write_text(json.dumps(doc))


def edit_quant_config(ckpt: Path, **changes: object) -> None:
    doc = json.loads((ckpt / "config.json").read_text())
    doc.setdefault("quantization_config", {}).update(changes)
    (ckpt / "config.json").write_text(json.dumps(doc))


def set_index_file(ckpt: Path, key: str, name: object) -> None:
    """Point the index entry of ``key`` at file ``name``."""
    index = ckpt / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    doc["weight_map"][key] = name
    index.write_text(json.dumps(doc))


def set_gguf_half(ckpt: Path, key: str, at: int, value: float) -> None:
    """Set the float16 at byte ``at`` of GGUF tensor ``key``'s data (a block's scale field)."""
    import gguf

    file = ckpt / GGUF_FILE
    (start,) = [int(t.data_offset) for t in gguf.GGUFReader(file).tensors if t.name == key]
    with open(file, "r+b") as fh:
        fh.seek(start + at)
        fh.write(np.float16(value).tobytes())
