"""Keep-quantized load vs the bf16 load of the same model: parameter bytes and peak RSS.

For issue 26's "about 0.5x (FP8) / 0.27x (FP4)" claim. Two checkpoints of the same
model (``layers`` linears of ``[out, in]``, written by the project's own encoders):
FP8 with 128x128 blocks (``flexq_fp8``) and compressed-tensors MXFP4 (``flexq_mxfp4``:
E2M1 pairs, E8M0 scales a 32-block). For each, two fresh processes
(``python -m bench.kept_load KIND FORMAT CKPT LAYERS OUT IN``), each building its model
under ``paddle.LazyGuard`` and loading it, as a user's first load runs:

- ``kept``: one :class:`flexq.nn.QuantizedLinear` a weight, filled through
  :class:`flexq.QuantizedTarget` (FP8: float8 values, float32 scales; MXFP4: uint8
  values ``[N, K/2]``, uint8 E8M0 scales ``[N, K/32]``);
- ``bf16``: one bf16 ``paddle.nn.Linear`` a weight, the checkpoint dequantized into it
  (``^T`` statements, as PaddleFormers' rules have).

Each reports its parameter bytes and ``peak_rss``: the process's VmHWM during
build + load minus its RSS before (imports done), i.e. the model plus what the load
staged. Then the PaddleFormers Llama of :mod:`bench.kept_pf` (where paddleformers is
installed). Runs in about four minutes (``python -m bench.kept_load``, ``nox -s bench --
kept``, or within ``nox -s bench``).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import kept_pf
from bench.fresh import run_module
from bench.kept_table import paragraph

KINDS = ("kept", "bf16")
#: checkpoint format -> what the report calls its quantization.
FORMATS = {"fp8": "FP8 128x128 blocks", "mxfp4": "compressed-tensors MXFP4"}


def _key(i: int) -> str:
    return f"model.layers.{i}.mlp.up_proj.weight"


def write_checkpoint(root: Path, fmt: str, layers: int, out: int, inp: int) -> Path:
    """``layers`` random linears ``[out, inp]`` quantized to ``fmt`` (a :data:`FORMATS` key)."""
    import numpy as np

    from flexq_fp8 import save_fp8_checkpoint
    from flexq_mxfp4.encode import save_mxfp4_checkpoint

    rng = np.random.default_rng(0)
    weights = {_key(i): rng.standard_normal((out, inp), np.float32) for i in range(layers)}
    if fmt == "fp8":
        return save_fp8_checkpoint(root / fmt, weights, layout="block", block_size=(128, 128))
    return save_mxfp4_checkpoint(root / fmt, weights)


def _kept_layer(fmt: str, n: int, k: int) -> Any:
    from flexq.nn import QuantizedLinear, fp4_form, fp8_form

    return QuantizedLinear(fp8_form(n, k, "block") if fmt == "fp8" else fp4_form("mxfp4", n, k))


def child(kind: str, fmt: str, ckpt: str, layers: int, out: int, inp: int) -> dict[str, Any]:
    """One load in this (fresh) process: its parameter bytes and peak RSS."""
    import paddle

    import flexq
    from bench.fresh import Measured

    keys = [_key(i) for i in range(layers)]
    with Measured() as m:
        with paddle.LazyGuard():
            if kind == "kept":
                built = [_kept_layer(fmt, out, inp) for _ in keys]
            else:
                paddle.set_default_dtype("bfloat16")
                built = [paddle.nn.Linear(inp, out, bias_attr=False) for _ in keys]
        model = paddle.nn.LayerList(built)
        if kind == "kept":
            state: dict[str, Any] = {
                key: flexq.QuantizedTarget(layer.weight, layer.scales)
                for key, layer in zip(keys, built, strict=True)
            }
            aoa = None
        else:
            state = {f"linear{i}.weight": layer.weight for i, layer in enumerate(built)}
            aoa = {"aoa_statements": [f"{k}^T -> linear{i}.weight" for i, k in enumerate(keys)]}
        flexq.load_state_dict(state, ckpt, aoa_config=aoa)
    nbytes = sum(math.prod(p.shape) * p.element_size() for p in model.parameters())
    return {"kind": kind, "parameter_bytes": nbytes, **m.figures()}


def measure_case(fmt: str, layers: int, out: int, inp: int) -> dict[str, Any]:
    """Both loads of one ``fmt`` checkpoint, and the kept / bf16 ratios."""
    with tempfile.TemporaryDirectory(prefix="flexq-kept-bench-") as tmp:
        ckpt = write_checkpoint(Path(tmp), fmt, layers, out, inp)
        args = [fmt, str(ckpt), str(layers), str(out), str(inp)]
        runs = {kind: run_module("bench.kept_load", [kind, *args]) for kind in KINDS}
    kept, bf16 = runs["kept"], runs["bf16"]
    return {
        "model": f"{layers} linears [{out}, {inp}], {FORMATS[fmt]}",
        "runs": runs,
        "parameter_ratio": kept["parameter_bytes"] / bf16["parameter_bytes"],
        "peak_rss_ratio": kept["peak_extra_rss"] / bf16["peak_extra_rss"],
    }


#: The heading of docs/performance.md's kept section (:func:`bench.report.replace_section`).
HEADING = "## Keep-quantized load vs bf16 load (issue 26; fresh processes)"


def measure(
    pf_rounds: int = kept_pf.ROUNDS,
    log: Callable[[str], Any] = print,
    layers: int = 8,
    out: int = 2048,
    inp: int = 4096,
) -> dict[str, Any]:
    """Every :data:`FORMATS` case of the same flat model, then the PaddleFormers Llama
    (:mod:`bench.kept_pf`, ``pf_rounds`` fresh processes a load; skipped, saying why,
    where paddleformers is not installed)."""
    cases = {}
    for fmt in FORMATS:
        log(f"kept vs bf16 load: {FORMATS[fmt]}")
        cases[fmt] = measure_case(fmt, layers, out, inp)
    return {"cases": cases, "paddleformers": kept_pf.measure(pf_rounds, log)}


def markdown(r: dict[str, Any], source: str | None = None) -> list[str]:
    """The docs/performance.md section of :func:`measure`'s result (``source``: the
    results file, when the series ran alone)."""
    pf = r.get("paddleformers")
    ran = ["", f"Run alone (`nox -s bench -- kept`); figures in `{source}`."] if source else []
    intro = (
        "`bench/kept_load.py`, one fresh process a load. Peak RSS: VmHWM during build + "
        "load above the RSS before (the model and what the load staged)."
    )
    note = (
        "Above the parameters, each load stages one tensor at a time (kept: its bytes; "
        "bf16: its float32 dequantization)."
    )
    flat = paragraph(
        intro, r["cases"].values(), "runs", lambda c: c["model"].rpartition(", ")[2], note
    )
    return [HEADING, "", *flat, *(kept_pf.markdown(pf) if pf else []), *ran]


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] in KINDS:
        kind_, fmt_, ckpt_, *dims = sys.argv[1:]
        print(json.dumps(child(kind_, fmt_, ckpt_, *(int(d) for d in dims))))
    else:
        print(json.dumps(measure(log=lambda s: print(s, file=sys.stderr)), indent=2))
