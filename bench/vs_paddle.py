"""flexq loading the block-FP8 checkpoint vs Paddle's own loader on its bfloat16 twin.

Paddle's ``flex_checkpoint.dcp.load_state_dict(sd, dir, safetensors=True)``
reads the bf16 checkpoint into bf16 targets; flexq reads the FP8 checkpoint
(a quarter of the float32 bytes, half the bf16 bytes) into bf16 targets and
into float32 targets, with its defaults (and with the flexcheckpoint engine
asked for by name), in one process, alternating rounds. Paddle writes a
metadata file into the directory it loads, so the bf16 twin lives in the run's
scratch directory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import flexq
from bench.checkpoints import SIDE, fp8_keys
from bench.timing import alternate, median


def _targets(keys: list[str], dtype: str) -> dict[str, Any]:
    import paddle

    return {k: paddle.empty([SIDE, SIDE], dtype=dtype) for k in keys}


def _paddle_bf16(path: Path, keys: list[str]) -> Callable[[], object]:
    from paddle.distributed.flex_checkpoint.dcp.load_state_dict import load_state_dict

    state = _targets(keys, "bfloat16")
    return lambda: load_state_dict(state, str(path), safetensors=True)


def _flexq(path: Path, keys: list[str], dtype: str, engine: str) -> Callable[[], object]:
    """flexq's defaults (``engine="auto"``), or the engine named."""
    state = _targets(keys, dtype)
    return lambda: flexq.load_state_dict(state, path, engine=engine)  # type: ignore[arg-type]


def compare(fp8_dir: Path, bf16_dir: Path, n: int, rounds: int) -> dict[str, Any]:
    """Median seconds of Paddle (bf16 ckpt) and flexq (FP8 ckpt), ratios to Paddle."""
    keys = fp8_keys(n)
    times = alternate(
        {
            "paddle_bf16_ckpt_to_bf16": lambda: _paddle_bf16(bf16_dir, keys),
            "flexq_fp8_ckpt_to_bf16_defaults": lambda: _flexq(fp8_dir, keys, "bfloat16", "auto"),
            "flexq_fp8_ckpt_to_bf16_flexcheckpoint": lambda: _flexq(
                fp8_dir, keys, "bfloat16", "flexcheckpoint"
            ),
            "flexq_fp8_ckpt_to_f32_defaults": lambda: _flexq(fp8_dir, keys, "float32", "auto"),
        },
        rounds,
    )
    medians = {k: median(v) for k, v in times.items()}
    base = medians["paddle_bf16_ckpt_to_bf16"]
    return {
        "tensors": n,
        "rounds": rounds,
        "checkpoint_bytes": {
            "fp8": sum(p.stat().st_size for p in fp8_dir.glob("*.safetensors")),
            "bf16": sum(p.stat().st_size for p in bf16_dir.glob("*.safetensors")),
        },
        "seconds": times,
        "median_s": medians,
        "ratio_to_paddle": {k: m / base for k, m in medians.items() if k != next(iter(medians))},
    }
