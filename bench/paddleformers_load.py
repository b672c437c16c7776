"""PaddleFormers Llama load time: flexq on the FP8 twin vs PaddleFormers on the bf16 checkpoint.

Usage: ``python bench/paddleformers_load.py [--rounds N] [--layers L] [--hidden H]``
(needs ``paddleformers``; ``nox -s paddleformers`` installs it). Builds one
bf16 Llama, writes it with PaddleFormers' ``save_pretrained`` and its FP8 twin
(128x128 blocks, flexq's encoder), then times, in the same process and
alternating which goes first, ``LlamaForCausalLM.from_pretrained(bf16)`` and
``flexq.paddleformers.from_pretrained(LlamaForCausalLM, fp8)``; prints medians.
Files are in the page cache after the warm-up round, so this compares decode and
fill work, not disk reads. PaddleFormers' default path pays for a random init
first; its ``low_cpu_mem_usage=True`` path (no init, lazy parameters) fails in
1.2.0 on these targets ("Tensor not initialized yet"), so it is not timed.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import flexq
import flexq.paddleformers
from flexq.formatkit.rounding import bfloat16_bits_to_float32
from flexq.plugin.manager import registry


def save_random(model_class: Any, config: Any, directory: Path) -> Path:
    """A randomly initialised bf16 ``model_class(config)`` saved by PaddleFormers'
    ``save_pretrained`` (HF layout) into ``directory``."""
    import paddle

    config.dtype = "bfloat16"
    paddle.set_default_dtype("bfloat16")
    try:
        model = model_class(config)
    finally:
        paddle.set_default_dtype("float32")
    model.save_pretrained(str(directory))
    for stray in directory.glob("saved_signal_*"):
        stray.unlink()  # PaddleFormers' multi-rank save marker, not part of the checkpoint
    return directory


def build_checkpoints(root: Path, layers: int, hidden: int) -> tuple[Any, Path, Path]:
    """The Llama class, its bf16 checkpoint and its FP8 twin under ``root``."""
    from paddleformers.transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=8192,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 256,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    bf16 = save_random(LlamaForCausalLM, config, root / "bf16")
    ckpt = flexq.Checkpoint(bf16)
    weights, others = {}, {}
    for key, info in ckpt.tensors.items():
        if key.endswith("proj.weight"):
            weights[key] = bfloat16_bits_to_float32(ckpt.read(key))
        else:
            others[key] = flexq.RawTensor(info.dtype, ckpt.read(key))
    fp8 = root / "fp8"
    registry.encode("fp8", fp8, weights, others)
    quant = json.loads((fp8 / "config.json").read_text())["quantization_config"]
    (fp8 / "config.json").write_text(json.dumps({**ckpt.config, "quantization_config": quant}))
    return LlamaForCausalLM, bf16, fp8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=1024)
    args = parser.parse_args()
    from paddle.distributed.fleet.utils.log_util import logger

    logger.setLevel(logging.WARNING)  # PaddleFormers' loader logs every file at INFO
    with tempfile.TemporaryDirectory(prefix="flexq-pf-bench-") as tmp:
        cls, bf16, fp8 = build_checkpoints(Path(tmp), args.layers, args.hidden)
        runs = {
            "paddleformers_bf16": lambda: cls.from_pretrained(str(bf16)),
            "flexq_fp8": lambda: flexq.paddleformers.from_pretrained(cls, fp8),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(args.rounds + 1):  # round 0 warms the page cache and imports
            order = list(runs) if r % 2 else list(reversed(runs))
            for name in order:
                gc.collect()
                start = time.perf_counter()
                model = runs[name]()
                elapsed = time.perf_counter() - start
                del model
                if r:
                    times[name].append(elapsed)
        params = sum(i.nbytes for i in flexq.Checkpoint(bf16).tensors.values()) // 2
        sizes = {p.name: sum(f.stat().st_size for f in p.iterdir()) for p in (bf16, fp8)}
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(
        json.dumps(
            {
                "model": f"Llama, {args.layers} layers, hidden {args.hidden}",
                "parameters": params,
                "checkpoint_bytes": sizes,
                "rounds": args.rounds,
                "median_seconds": {k: round(v, 3) for k, v in medians.items()},
                "all_seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
                "flexq_fp8_over_paddleformers_bf16": round(
                    medians["flexq_fp8"] / medians["paddleformers_bf16"], 2
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
