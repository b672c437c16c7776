"""Keep-quantized load vs the bf16 load of the same model: parameter bytes and peak RSS.

For issue 26's "about 0.5x (FP8)" claim. One FP8 checkpoint (``--layers`` linears
of ``[--out, --in]``, 128x128 blocks, flexq's encoder); two fresh processes
(``python -m bench.kept_load KIND CKPT``), each building its model under
``paddle.LazyGuard`` and loading it, as a user's first load runs:

- ``kept``: one :class:`flexq.nn.QuantizedLinear` a weight, filled through
  :class:`flexq.QuantizedTarget` (float8 values, float32 scales);
- ``bf16``: one bf16 ``paddle.nn.Linear`` a weight, the checkpoint dequantized into it
  (``^T`` statements, as PaddleFormers' rules have).

Each reports its parameter bytes and ``peak_rss``: the process's VmHWM during
build + load minus its RSS before (imports done), i.e. the model plus what the load
staged. Runs in about a minute (``python -m bench.kept_load``, or within ``nox -s bench``).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.fresh import run_module

KINDS = ("kept", "bf16")


def _key(i: int) -> str:
    return f"model.layers.{i}.mlp.up_proj.weight"


def write_checkpoint(root: Path, layers: int, out: int, inp: int) -> Path:
    """``layers`` random FP8 128x128-block linears ``[out, inp]``."""
    import numpy as np

    from flexq_fp8 import save_fp8_checkpoint

    rng = np.random.default_rng(0)
    weights = {_key(i): rng.standard_normal((out, inp), np.float32) for i in range(layers)}
    return save_fp8_checkpoint(root / "fp8", weights, layout="block", block_size=(128, 128))


def child(kind: str, ckpt: str) -> dict[str, Any]:
    """One load in this (fresh) process: its parameter bytes and peak RSS."""
    import paddle

    import flexq
    from bench.fresh import Measured
    from flexq.nn import QuantizedLinear, fp8_form

    with flexq.Checkpoint(ckpt) as c:
        shapes = {k: tuple(i.shape) for k, i in c.tensors.items() if i.dtype == "F8_E4M3"}
    with Measured() as m:
        with paddle.LazyGuard():
            if kind == "kept":
                layers = [QuantizedLinear(fp8_form(n, k, "block")) for n, k in shapes.values()]
            else:
                paddle.set_default_dtype("bfloat16")
                layers = [paddle.nn.Linear(k, n, bias_attr=False) for n, k in shapes.values()]
        model = paddle.nn.LayerList(layers)
        if kind == "kept":
            state: dict[str, Any] = {
                key: flexq.QuantizedTarget(layer.weight, layer.weight_scale_inv)
                for key, layer in zip(shapes, layers, strict=True)
            }
            aoa = None
        else:
            state = {f"linear{i}.weight": layer.weight for i, layer in enumerate(layers)}
            aoa = {"aoa_statements": [f"{k}^T -> linear{i}.weight" for i, k in enumerate(shapes)]}
        flexq.load_state_dict(state, ckpt, aoa_config=aoa)
    nbytes = sum(math.prod(p.shape) * p.element_size() for p in model.parameters())
    return {"kind": kind, "parameter_bytes": nbytes, **m.figures()}


def measure(layers: int = 8, out: int = 2048, inp: int = 4096) -> dict[str, Any]:
    """Both loads of one checkpoint, and the kept / bf16 ratios."""
    with tempfile.TemporaryDirectory(prefix="flexq-kept-bench-") as tmp:
        ckpt = write_checkpoint(Path(tmp), layers, out, inp)
        runs = {kind: run_module("bench.kept_load", [kind, str(ckpt)]) for kind in KINDS}
    kept, bf16 = runs["kept"], runs["bf16"]
    return {
        "model": f"{layers} linears [{out}, {inp}], FP8 128x128 blocks",
        "runs": runs,
        "parameter_ratio": kept["parameter_bytes"] / bf16["parameter_bytes"],
        "peak_rss_ratio": kept["peak_extra_rss"] / bf16["peak_extra_rss"],
    }


def markdown(r: dict[str, Any]) -> list[str]:
    """The docs/performance.md section of :func:`measure`'s result."""
    mib = 1 << 20
    rows = [
        f"| {k} | {v['parameter_bytes'] / mib:.0f} MiB | {v['peak_extra_rss'] / mib:.0f} MiB "
        f"| {v['seconds']:.2f} s |"
        for k, v in r["runs"].items()
    ]
    return [
        "",
        "## Keep-quantized load vs bf16 load (issue 26; one fresh process each)",
        "",
        f"{r['model']}; `bench/kept_load.py`. Peak RSS: VmHWM during build + load above "
        "the RSS before (the model and what the load staged).",
        "",
        "| load | parameters | peak RSS | seconds |",
        "| --- | ---: | ---: | ---: |",
        *rows,
        "",
        f"kept / bf16: parameters {r['parameter_ratio']:.2f}x, "
        f"peak RSS {r['peak_rss_ratio']:.2f}x. Above the parameters, each load stages "
        "one tensor at a time (kept: its bytes; bf16: its float32 dequantization).",
    ]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in KINDS:
        print(json.dumps(child(sys.argv[1], sys.argv[2])))
    else:
        print(json.dumps(measure(), indent=2))
