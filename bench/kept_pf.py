"""A PaddleFormers Llama kept quantized vs dequantized to bf16: parameter bytes and peak RSS.

For issue 26's "about 0.5x (FP8) of the bf16 model" on a real model class. One
Llama (:data:`LAYERS` layers, hidden :data:`HIDDEN`, ~210 MB in bf16) saved by
PaddleFormers and its FP8 128x128-block twin (flexq's encoder,
:func:`bench.paddleformers_load.build_checkpoints`); then, alternating, fresh
processes (``python -m bench.kept_pf KIND CKPT``) each loading the twin once:

- ``kept``: ``flexq.paddleformers.from_pretrained(LlamaForCausalLM, twin,
  dtype="bfloat16", keep_quantized=True)``: every quantized linear a
  :class:`flexq.nn.QuantizedLinear` (float8 values, float32 scales), the rest bf16;
- ``bf16``: the same call without ``keep_quantized``: every linear dequantized to bf16.

Each reports its parameter bytes and ``peak_extra_rss`` (VmHWM during build + load
above the RSS before, imports done: the model and what the load staged); the result
holds every run and the medians over ``rounds`` rounds (after one untimed round
that compiles bytecode and fills the page cache). Needs ``paddleformers``
(``nox -s paddleformers``'s virtualenv has it); without it :func:`measure` says so and
skips. About two minutes on 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from bench.fresh import run_module

KINDS = ("kept", "bf16")
LAYERS, HIDDEN = 8, 1024
ROUNDS = 3
FIELDS = ("parameter_bytes", "peak_extra_rss", "peak_extra_anon", "seconds")


def unavailable() -> str | None:
    """Why this case cannot run here (None: it can)."""
    if importlib.util.find_spec("paddleformers") is None:
        return (
            "paddleformers is not installed in this interpreter: run `python bench/run.py kept` "
            "with one that has it (e.g. .nox/paddleformers/bin/python)"
        )
    return None


def child(kind: str, ckpt: str) -> dict[str, Any]:
    """One load of the twin in this (fresh) process: parameter bytes and peak RSS."""
    import logging

    from paddle.distributed.fleet.utils.log_util import logger
    from paddleformers.transformers import LlamaForCausalLM

    import flexq.paddleformers
    from bench.fresh import Measured
    from flexq.nn import QuantizedLinear

    logger.setLevel(logging.WARNING)  # PaddleFormers logs every file it opens at INFO
    with Measured() as m:
        model = flexq.paddleformers.from_pretrained(
            LlamaForCausalLM,
            ckpt,
            dtype="bfloat16",
            keep_quantized=kind == "kept",
            progress=False,
        )
    nbytes = sum(math.prod(p.shape) * p.element_size() for p in model.parameters())
    kept = sum(isinstance(layer, QuantizedLinear) for layer in model.sublayers())
    return {"kind": kind, "parameter_bytes": nbytes, "kept_linears": kept, **m.figures()}


def measure(rounds: int = ROUNDS, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Both loads of the Llama twin, ``rounds`` fresh processes each, and the kept / bf16
    ratios of the medians (or ``{"skipped": why}``)."""
    why = unavailable()
    if why is not None:
        log(f"skipped the PaddleFormers Llama case: {why}")
        return {"skipped": why}
    from bench.paddleformers_load import build_checkpoints

    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="flexq-kept-pf-bench-") as tmp:
        log(f"PaddleFormers Llama ({LAYERS} layers, hidden {HIDDEN}) and its FP8 twin")
        _, bf16, fp8 = build_checkpoints(Path(tmp), LAYERS, HIDDEN)
        bf16_bytes = sum(f.stat().st_size for f in bf16.iterdir() if f.suffix == ".safetensors")
        for r in range(rounds + 1):  # round 0: bytecode compiled, pages cached, not kept
            for kind in KINDS if r % 2 else KINDS[::-1]:
                figures = run_module("bench.kept_pf", [kind, str(fp8)])
                if r:
                    runs[kind].append(figures)
    medians = {k: {f: median(x[f] for x in v) for f in FIELDS} for k, v in runs.items()}
    kept, dense = medians["kept"], medians["bf16"]
    return {
        "model": f"PaddleFormers LlamaForCausalLM, {LAYERS} layers, hidden {HIDDEN}, "
        "FP8 128x128-block twin",
        "bf16_checkpoint_bytes": bf16_bytes,
        "kept_linears": runs["kept"][0]["kept_linears"],
        "rounds": rounds,
        "runs": runs,
        "medians": medians,
        "parameter_ratio": kept["parameter_bytes"] / dense["parameter_bytes"],
        "peak_rss_ratio": kept["peak_extra_rss"] / dense["peak_extra_rss"],
    }


def markdown(r: dict[str, Any]) -> list[str]:
    """The PaddleFormers part of docs/performance.md's kept section."""
    if "skipped" in r:
        return ["", f"PaddleFormers Llama case skipped: {r['skipped']}."]
    mib = 1 << 20
    rows = [
        f"| {kind} | {m['parameter_bytes'] / mib:.0f} MiB | {m['peak_extra_rss'] / mib:.0f} MiB "
        f"| {m['seconds']:.2f} s |"
        for kind, m in r["medians"].items()
    ]
    return [
        "",
        f"{r['model']} ({r['bf16_checkpoint_bytes'] / 1e6:.0f} MB in bf16; "
        f"{r['kept_linears']} kept linears), `flexq.paddleformers.from_pretrained(..., "
        'dtype="bfloat16", keep_quantized=True)` vs the same call dequantizing to bf16 '
        f"(`bench/kept_pf.py`), medians of {r['rounds']} fresh processes each, alternating:",
        "",
        "| load | parameters | peak RSS | seconds |",
        "| --- | ---: | ---: | ---: |",
        *rows,
        "",
        f"kept / bf16: parameters {r['parameter_ratio']:.2f}x, peak RSS "
        f"{r['peak_rss_ratio']:.2f}x (the embeddings, norms and lm_head stay bf16 in both).",
    ]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in KINDS:
        print(json.dumps(child(sys.argv[1], sys.argv[2])))
    else:
        print(json.dumps(measure(log=lambda s: print(s, file=sys.stderr)), indent=2))
