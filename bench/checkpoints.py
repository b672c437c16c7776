"""The checkpoints the comparisons share, written once per run into a scratch directory.

flexq is imported inside the writers: fresh-process children import this module
for its key names and must not have flexq imported before they time it.

- block-FP8 (DeepSeek-V3 layout): ``n`` linears of 2048x2048 F8_E4M3 with F32
  128x128 block scales (``weight_scale_inv``), sharded with an index (torch DCP
  needs ``model.safetensors.index.json``);
- its bfloat16 twin: the same weights dequantized by flexq and rounded once;
- a DeepSeek-shaped block-FP8 MoE stack (:class:`MoeShape`, ~1 GiB) for the scale series;
- MXFP4 gpt-oss experts: U8 ``*_blocks`` [E, out, G, 16] and ``*_scales``
  [E, out, G] of one layer's ``gate_up_proj`` and ``down_proj`` (logical
  [E, in, out], in = G*32).

Codes are random (dequantize cost does not depend on values), so writing is
fast; NaN codes 0x7F/0xFF are left out so every comparison can use equality.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

SIDE = 2048
BLOCK = 128
BASE_TENSORS = 12
#: side of the linears of the >= 1 GiB checkpoints.
BIG_SIDE = 4096
#: shard size of the block-FP8 checkpoints: 4 linears per file.
SHARD_BYTES = 4 * SIDE * SIDE + 4 * 16 * 16 * 4


def shard_bytes(side: int) -> int:
    """Bytes of one shard of 4 block-FP8 linears of ``side`` x ``side``."""
    return 4 * side * side + 4 * (side // BLOCK) ** 2 * 4


#: gpt-oss-20b's hidden and intermediate sizes, with fewer experts.
GPT_OSS_HIDDEN = 2880
GPT_OSS_EXPERTS = 4
MXFP4_PREFIX = "model.layers.0.mlp.experts."


def fp8_keys(n: int) -> list[str]:
    """Logical keys of a block-FP8 checkpoint with ``n`` linears."""
    return [f"model.layers.{i // 4}.mlp.proj{i % 4}.weight" for i in range(n)]


def write_fp8_block(directory: Path, n: int, seed: int = 0, side: int = SIDE) -> Path:
    """A block-FP8 checkpoint of ``n`` linears of ``side`` x ``side`` (reuses one random set)."""
    import flexq
    from flexq_fp8.encode import quantization_config

    rng = np.random.default_rng(seed)
    grid = (side // BLOCK, side // BLOCK)
    codes = [random_e4m3(rng, (side, side)) for _ in range(4)]
    scales = [rng.uniform(1e-4, 1e-2, grid).astype(np.float32) for _ in range(4)]
    tensors: dict[str, flexq.RawTensor] = {}
    for i, key in enumerate(fp8_keys(n)):
        tensors[key] = flexq.RawTensor("F8_E4M3", codes[i % 4])
        tensors[key + "_scale_inv"] = flexq.RawTensor("F32", scales[i % 4])
    config = {
        "torch_dtype": "bfloat16",
        "quantization_config": quantization_config("fp8", "block", BLOCK, "F32", []),
    }
    return flexq.save_checkpoint(
        directory, tensors, config=config, max_shard_bytes=shard_bytes(side)
    )


def random_e4m3(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random E4M3 codes of ``shape``, half negative; the NaN codes 0x7F/0xFF never drawn."""
    codes = rng.integers(0, 0x7F, shape, dtype=np.uint8)
    codes[rng.random(shape) < 0.5] |= 0x80
    return codes


def block_scales(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Random F32 scales of the 128x128 blocks covering a weight of ``shape``."""
    grid = (-(-shape[0] // BLOCK), -(-shape[1] // BLOCK))
    return rng.uniform(1e-4, 1e-2, grid).astype(np.float32)


def write_fp8_moe(directory: Path, shape: MoeShape, seed: int = 0) -> Path:
    """A DeepSeek-shaped block-FP8 MoE checkpoint of ``shape``, one file per layer
    (codes and scales random: dequantize cost does not depend on values)."""
    import flexq
    from flexq.formatkit.rounding import float32_to_bfloat16_bits
    from flexq_fp8.encode import quantization_config

    rng = np.random.default_rng(seed)
    tensors: dict[str, flexq.RawTensor] = {}
    shard_of: dict[str, int] = {}
    for layer in range(shape.layers):
        for key, dims in shape.fp8(layer).items():
            tensors[key] = flexq.RawTensor("F8_E4M3", random_e4m3(rng, dims))
            tensors[key + "_scale_inv"] = flexq.RawTensor("F32", block_scales(rng, dims))
            shard_of[key] = shard_of[key + "_scale_inv"] = layer
        for key, extent in shape.bf16(layer).items():
            values = rng.uniform(0.5, 1.5, extent).astype(np.float32)
            tensors[key] = flexq.RawTensor("BF16", float32_to_bfloat16_bits(values))
            shard_of[key] = layer
    config = {
        "torch_dtype": "bfloat16",
        "quantization_config": quantization_config("fp8", "block", BLOCK, "F32", []),
    }
    return flexq.save_checkpoint(directory, tensors, config=config, shard_of=shard_of)


@dataclass(frozen=True)
class MoeShape:
    """A DeepSeek-shaped MoE stack: per layer an attention pair (q_proj column-, o_proj
    row-parallel), routed experts and one shared expert (gate/up column-, down row-parallel),
    a BF16 norm and router. ``inter`` = DeepSeek-V2-Lite's 1408, which cuts 128-blocks on
    2- and 4-way splits."""

    layers: int = 6
    hidden: int = 4096
    experts: int = 8
    inter: int = 1408

    def dense(self, layer: int) -> list[str]:
        """The keys split by tensor parallelism (attention and the shared expert)."""
        p = f"model.layers.{layer}"
        mlp = [f"{p}.mlp.shared_experts.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")]
        return [f"{p}.self_attn.q_proj.weight", f"{p}.self_attn.o_proj.weight", *mlp]

    def expert(self, layer: int, e: int) -> list[str]:
        """Expert ``e``'s keys (split by expert parallelism)."""
        p = f"model.layers.{layer}.mlp.experts.{e}"
        return [f"{p}.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")]

    def fp8(self, layer: int) -> dict[str, tuple[int, int]]:
        """Key -> [out, in] of every FP8 weight of ``layer``."""
        h, i = self.hidden, self.inter
        shapes = {}
        for key in self.dense(layer) + [
            k for e in range(self.experts) for k in self.expert(layer, e)
        ]:
            wide = "q_proj" in key or "o_proj" in key
            shapes[key] = (h, h) if wide else ((h, i) if "down_proj" in key else (i, h))
        return shapes

    def bf16(self, layer: int) -> dict[str, tuple[int, ...]]:
        """Key -> shape of ``layer``'s replicated BF16 tensors (norm, router)."""
        p = f"model.layers.{layer}"
        return {
            f"{p}.input_layernorm.weight": (self.hidden,),
            f"{p}.mlp.gate.weight": (self.experts, self.hidden),
        }


def write_bf16_twin(fp8_dir: Path, directory: Path) -> Path:
    """The bfloat16 checkpoint holding exactly what flexq makes of ``fp8_dir``."""
    import flexq

    ct = flexq.compose(fp8_dir)
    tensors = {k: flexq.RawTensor("BF16", ct.load(k, "bfloat16")) for k in ct.entries}
    ct.checkpoint.close()
    return flexq.save_checkpoint(directory, tensors, max_shard_bytes=2 * SHARD_BYTES)


def mxfp4_keys() -> dict[str, tuple[int, int, int]]:
    """Logical key -> stored shape [E, out, in] of the gpt-oss expert weights (blocks
    decoded, before the transpose to the logical [E, in, out])."""
    h, e = GPT_OSS_HIDDEN, GPT_OSS_EXPERTS
    return {MXFP4_PREFIX + "gate_up_proj": (e, 2 * h, h), MXFP4_PREFIX + "down_proj": (e, h, h)}


def write_mxfp4_experts(directory: Path, seed: int = 0) -> Path:
    """gpt-oss style U8 blocks and E8M0 scales, each projection in its own shard."""
    import flexq

    rng = np.random.default_rng(seed)
    tensors: dict[str, flexq.RawTensor] = {}
    shard_of: dict[str, int] = {}
    for i, (key, (e, out, inp)) in enumerate(mxfp4_keys().items()):
        g = inp // 32
        tensors[key + "_blocks"] = flexq.RawTensor(
            "U8", rng.integers(0, 256, (e, out, g, 16), dtype=np.uint8)
        )
        tensors[key + "_scales"] = flexq.RawTensor(
            "U8", rng.integers(110, 135, (e, out, g), dtype=np.uint8)
        )
        shard_of[key + "_blocks"] = shard_of[key + "_scales"] = i
    config = {"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": []}}
    return flexq.save_checkpoint(directory, tensors, config=config, shard_of=shard_of)
