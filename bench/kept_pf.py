"""PaddleFormers models kept quantized vs dequantized to bf16: parameter bytes and peak RSS.

For issue 26's "about 0.5x (FP8) / 0.27x (FP4) of the bf16 model" on real model
classes (:data:`MODELS`): a Llama (8 layers, hidden 1024, ~210 MB in bf16) saved by
PaddleFormers and its FP8 128x128-block twin (flexq's encoder,
:func:`bench.paddleformers_load.build_checkpoints`), and a gpt-oss (6 layers, 8
experts, ~230 MB in bf16) and its MXFP4 twin as gpt-oss ships it (experts only,
:func:`write_gpt_oss`). Then, alternating, fresh processes (``python -m
bench.kept_pf KIND CLASS CKPT``) each loading a twin once:

- ``kept``: ``flexq.paddleformers.from_pretrained(cls, twin, dtype="bfloat16",
  keep_quantized=True)``: Llama's linears :class:`flexq.nn.QuantizedLinear` (float8
  values, float32 scales), gpt-oss's experts their MXFP4 blocks and E8M0 scales; the
  rest bf16;
- ``bf16``: the same call without ``keep_quantized``: everything dequantized to bf16.

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
from bench.kept_table import paragraph

KINDS = ("kept", "bf16")
LAYERS, HIDDEN = 8, 1024
ROUNDS = 3
#: gpt-oss experts: what its MXFP4 checkpoints quantize.
GPT_OSS_EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
FIELDS = ("parameter_bytes", "peak_extra_rss", "peak_extra_anon", "seconds")


def unavailable() -> str | None:
    """Why this case cannot run here (None: it can)."""
    if importlib.util.find_spec("paddleformers") is None:
        return (
            "paddleformers is not installed in this interpreter: run `python bench/run.py kept` "
            "with one that has it (e.g. .nox/paddleformers/bin/python)"
        )
    return None


def write_gpt_oss(root: Path) -> Path:
    """A random bf16 gpt-oss saved by PaddleFormers, and its MXFP4 twin (experts in
    gpt-oss' ``_blocks`` / ``_scales`` layout, the rest as saved) under ``root``."""
    from paddleformers.transformers import GptOssConfig, GptOssForCausalLM

    import flexq
    from bench.paddleformers_load import save_random
    from flexq.formatkit.rounding import bfloat16_bits_to_float32
    from flexq_mxfp4.encode import GPT_OSS_NOT_CONVERTED, quantize

    config = GptOssConfig(
        vocab_size=8192,
        hidden_size=768,
        intermediate_size=768,
        head_dim=64,
        num_hidden_layers=6,
        num_attention_heads=12,
        num_key_value_heads=4,
        num_local_experts=8,
        num_experts_per_tok=2,
        sliding_window=128,
        max_position_embeddings=256,
    )
    bf16 = save_random(GptOssForCausalLM, config, root / "gpt-oss-bf16")
    ckpt = flexq.Checkpoint(bf16)
    tensors: dict[str, Any] = {}
    for key, info in ckpt.tensors.items():
        if key.endswith(GPT_OSS_EXPERTS):  # HF's [E, in, out]: the encoder's logical layout
            tensors.update(quantize({key: bfloat16_bits_to_float32(ckpt.read(key))}))
        else:
            tensors[key] = flexq.RawTensor(info.dtype, ckpt.read(key))
    twin = root / "gpt-oss-mxfp4"
    quant = {"quant_method": "mxfp4", "modules_to_not_convert": GPT_OSS_NOT_CONVERTED}
    flexq.save_checkpoint(twin, tensors, config={**ckpt.config, "quantization_config": quant})
    ckpt.close()
    return twin


def _llama(root: Path) -> Path:
    from bench.paddleformers_load import build_checkpoints

    return build_checkpoints(root, LAYERS, HIDDEN)[2]


#: case -> (PaddleFormers class, what the report calls it, the twin's writer).
MODELS: dict[str, tuple[str, str, Callable[[Path], Path]]] = {
    "llama-fp8": (
        "LlamaForCausalLM",
        f"Llama, {LAYERS} layers, hidden {HIDDEN}, FP8 128x128-block twin",
        _llama,
    ),
    "gpt-oss-mxfp4": (
        "GptOssForCausalLM",
        "gpt-oss, 6 layers, hidden 768, 8 experts, MXFP4 twin (experts only, as gpt-oss ships)",
        write_gpt_oss,
    ),
}


def child(kind: str, cls_name: str, ckpt: str) -> dict[str, Any]:
    """One load of a twin in this (fresh) process: parameter bytes and peak RSS."""
    import logging

    import paddleformers.transformers as pft
    from paddle.distributed.fleet.utils.log_util import logger

    import flexq.paddleformers
    from bench.fresh import Measured
    from flexq.nn import QuantizedLinear
    from flexq.nn.experts import KEPT

    logger.setLevel(logging.WARNING)  # PaddleFormers logs every file it opens at INFO
    with Measured() as m:
        model = flexq.paddleformers.from_pretrained(
            getattr(pft, cls_name),
            ckpt,
            dtype="bfloat16",
            keep_quantized=kind == "kept",
            progress=False,
        )
    nbytes = sum(math.prod(p.shape) * p.element_size() for p in model.parameters())
    # kept weights: QuantizedLinear layers, and gpt-oss's stacked experts (flexq.nn.experts)
    kept = sum(
        isinstance(layer, QuantizedLinear) + len(getattr(layer, KEPT, {}))
        for layer in model.sublayers()
    )
    return {"kind": kind, "parameter_bytes": nbytes, "kept_weights": kept, **m.figures()}


def _bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.iterdir() if f.suffix == ".safetensors")


def measure(rounds: int = ROUNDS, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Every :data:`MODELS` case, ``rounds`` fresh processes a load (or ``{"skipped": why}``)."""
    why = unavailable()
    if why is not None:
        log(f"skipped the PaddleFormers cases: {why}")
        return {"skipped": why}
    cases = {}
    with tempfile.TemporaryDirectory(prefix="flexq-kept-pf-bench-") as tmp:
        for name, (cls_name, label, write) in MODELS.items():
            log(f"PaddleFormers {label}: kept vs bf16, {rounds} fresh processes each")
            twin = write(Path(tmp) / name)
            cases[name] = measure_case(cls_name, label, twin, rounds)
    return {"cases": cases}


def measure_case(cls_name: str, label: str, twin: Path, rounds: int) -> dict[str, Any]:
    """Both loads of one twin, alternating, and the kept / bf16 ratios of the medians."""
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for r in range(rounds + 1):  # round 0: bytecode compiled, pages cached, not kept
        for kind in KINDS if r % 2 else KINDS[::-1]:
            figures = run_module("bench.kept_pf", [kind, cls_name, str(twin)])
            if r:
                runs[kind].append(figures)
    medians = {k: {f: median(x[f] for x in v) for f in FIELDS} for k, v in runs.items()}
    kept, dense = medians["kept"], medians["bf16"]
    return {
        "model": f"PaddleFormers {label}",
        "twin_bytes": _bytes(twin),
        "kept_weights": runs["kept"][0]["kept_weights"],
        "rounds": rounds,
        "runs": runs,
        "medians": medians,
        "parameter_ratio": kept["parameter_bytes"] / dense["parameter_bytes"],
        "peak_rss_ratio": kept["peak_extra_rss"] / dense["peak_extra_rss"],
    }


def markdown(r: dict[str, Any]) -> list[str]:
    """The PaddleFormers part of docs/performance.md's kept section."""
    if "skipped" in r:
        return ["", f"PaddleFormers cases skipped: {r['skipped']}."]
    cases = list(r["cases"].values())
    rounds = ", ".join(str(n) for n in sorted({c["rounds"] for c in cases}))
    intro = (
        "PaddleFormers models from their quantized twins (`bench/kept_pf.py`): "
        '`flexq.paddleformers.from_pretrained(cls, twin, dtype="bfloat16", '
        "keep_quantized=True)` vs the same call dequantizing to bf16, medians of "
        f"{rounds} fresh processes a load, alternating:"
    )
    note = (
        "What the checkpoint leaves unquantized (embeddings, norms, lm_head; gpt-oss's "
        "attention and router too) stays bf16 in both loads."
    )

    def name(c: dict[str, Any]) -> str:
        return f"{c['model']} ({c['kept_weights']} kept)"

    return ["", *paragraph(intro, cases, "medians", name, note)]


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] in KINDS:
        print(json.dumps(child(*sys.argv[1:4])))
    else:
        print(json.dumps(measure(log=lambda s: print(s, file=sys.stderr)), indent=2))
