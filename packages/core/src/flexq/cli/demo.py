"""``flexq demo``: quantize a tiny Llama-style model in every installed format and load it back.

For newcomers: the whole product in one run. A small Paddle model (Paddle's
[in, out] Linear layout, fused qkv and gate/up weights) is written as an HF
checkpoint ([out, in] names like ``model.layers.0.self_attn.q_proj.weight``),
once unquantized and once per format through the format's own encoder. Each
checkpoint is loaded with :func:`flexq.load_state_dict` and AOA statements
that transpose and fuse the HF weights into the Paddle layout; a forward pass
compares its logits with the unquantized model's.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flexq.errors import FlexqError
from flexq.io.writer import RawTensor, save_checkpoint
from flexq.load.api import load_state_dict
from flexq.plugin.manager import registry

VOCAB, HIDDEN, HEADS, FFN, LAYERS, SEQ = 512, 128, 4, 256, 2, 32
HEAD_DIM = HIDDEN // HEADS
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def hf_weights(seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(linear weights [out, in], other tensors) of the HF checkpoint, seeded."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / math.sqrt(shape[-1])).astype(np.float32)

    linear, other = {}, {}
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        for name in PROJ:
            linear[f"{p}.self_attn.{name}.weight"] = normal(HIDDEN, HIDDEN)
        linear[f"{p}.mlp.gate_proj.weight"] = normal(FFN, HIDDEN)
        linear[f"{p}.mlp.up_proj.weight"] = normal(FFN, HIDDEN)
        linear[f"{p}.mlp.down_proj.weight"] = normal(HIDDEN, FFN)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            other[f"{p}.{norm}.weight"] = (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
    other["model.embed_tokens.weight"] = normal(VOCAB, HIDDEN)
    other["model.norm.weight"] = np.ones(HIDDEN, np.float32)
    other["lm_head.weight"] = normal(VOCAB, HIDDEN)
    return linear, other


def aoa_statements() -> list[str]:
    """HF names -> the Paddle model's names: transposes, fused qkv, fused gate/up."""
    out = [
        "model.embed_tokens.weight -> embed.weight",
        "model.norm.weight -> norm.weight",
        "lm_head.weight^T -> lm_head.weight",
    ]
    for i in range(LAYERS):
        hf, pd = f"model.layers.{i}", f"layers.{i}"
        out += [
            f"{hf}.input_layernorm.weight -> {pd}.ln1.weight",
            f"{hf}.post_attention_layernorm.weight -> {pd}.ln2.weight",
            f"{hf}.self_attn.q_proj.weight^T -> {pd}.tq",
            f"{hf}.self_attn.k_proj.weight^T -> {pd}.tk",
            f"{hf}.self_attn.v_proj.weight^T -> {pd}.tv",
            f"{pd}.tq, {pd}.tk, {pd}.tv -> {pd}.qkv.weight, fused_qkv, "
            f"num_heads={HEADS}, num_key_value_groups={HEADS}",
            f"{hf}.self_attn.o_proj.weight^T -> {pd}.o.weight",
            f"{hf}.mlp.gate_proj.weight^T -> {pd}.tg",
            f"{hf}.mlp.up_proj.weight^T -> {pd}.tu",
            f"{pd}.tg, {pd}.tu -> {pd}.gate_up.weight, fused_ffn",
            f"{hf}.mlp.down_proj.weight^T -> {pd}.down.weight",
        ]
    return out


def paddle_params() -> dict[str, Any]:
    """The Paddle model's parameters ([in, out] Linear layout), zero-initialised."""
    import paddle

    shapes = {
        "embed.weight": [VOCAB, HIDDEN],
        "norm.weight": [HIDDEN],
        "lm_head.weight": [HIDDEN, VOCAB],
    }
    for i in range(LAYERS):
        p = f"layers.{i}"
        shapes |= {
            f"{p}.ln1.weight": [HIDDEN],
            f"{p}.ln2.weight": [HIDDEN],
            f"{p}.qkv.weight": [HIDDEN, 3 * HIDDEN],
            f"{p}.o.weight": [HIDDEN, HIDDEN],
            f"{p}.gate_up.weight": [HIDDEN, 2 * FFN],
            f"{p}.down.weight": [FFN, HIDDEN],
        }
    return {k: paddle.zeros(s, dtype="float32") for k, s in shapes.items()}


def forward(params: dict[str, Any], tokens: Any) -> Any:
    """Logits of a causal Llama-style decoder (RMSNorm, MHA, SwiGLU; no rotary)."""
    import paddle
    import paddle.nn.functional as F

    def rms(x: Any, w: Any) -> Any:
        return x * paddle.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w

    x = F.embedding(tokens, params["embed.weight"])
    mask = paddle.triu(paddle.full([SEQ, SEQ], float("-inf")), diagonal=1)
    for i in range(LAYERS):
        p = f"layers.{i}"
        h = rms(x, params[f"{p}.ln1.weight"])
        # fused_qkv with one kv group per head lays columns out as [q_h, k_h, v_h] per head.
        qkv = (h @ params[f"{p}.qkv.weight"]).reshape([-1, SEQ, HEADS, 3, HEAD_DIM])
        q, k, v = (qkv[:, :, :, j].transpose([0, 2, 1, 3]) for j in range(3))
        att = F.softmax(q @ k.transpose([0, 1, 3, 2]) / math.sqrt(HEAD_DIM) + mask, axis=-1)
        o = (att @ v).transpose([0, 2, 1, 3]).reshape([-1, SEQ, HIDDEN])
        x = x + o @ params[f"{p}.o.weight"]
        h = rms(x, params[f"{p}.ln2.weight"])
        gate, up = paddle.split(h @ params[f"{p}.gate_up.weight"], 2, axis=-1)
        x = x + (F.silu(gate) * up) @ params[f"{p}.down.weight"]
    return rms(x, params["norm.weight"]) @ params["lm_head.weight"]


@dataclass(frozen=True)
class DemoRow:
    """One row of the demo table."""

    format: str
    checkpoint_bytes: int
    load_seconds: float
    max_weight_error: float
    logits_cosine: float
    tolerance: float
    #: the model the row loaded into, for the table's title.
    model: str = "a tiny Llama"

    @property
    def ok(self) -> bool:
        return self.logits_cosine >= self.tolerance


def _load(path: Path, formats: list[str] | None) -> tuple[dict[str, Any], float]:
    params = paddle_params()
    start = time.perf_counter()
    load_state_dict(params, path, aoa_config={"aoa_statements": aoa_statements()}, formats=formats)
    return params, time.perf_counter() - start


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two arrays, in float64."""
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def make_keep_dir(keep: Path) -> None:
    """Create ``--keep DIR`` (new or empty), or refuse it before any work is done."""
    if keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
        raise FlexqError(f"{keep}: --keep needs a new or empty directory")
    keep.mkdir(parents=True, exist_ok=True)


def run(workdir: Path | None = None, keep: Path | None = None) -> list[DemoRow]:
    """Write, load and compare the model in every installed format that can encode
    (``flexq demo`` runs :mod:`flexq.cli.demo_paddleformers` instead where PaddleFormers
    is installed).

    :param keep: write the checkpoints into this new (or empty) directory, one
        subdirectory per format plus ``unquantized``, and leave them there.
    """
    import paddle

    if keep is not None:
        make_keep_dir(keep)
    linear, other = hf_weights()
    others = {k: RawTensor.of(v) for k, v in other.items()}
    tokens = paddle.to_tensor(np.random.default_rng(1).integers(0, VOCAB, (2, SEQ)))
    with (
        nullcontext(str(keep))
        if keep is not None
        else tempfile.TemporaryDirectory(prefix="flexq-demo-", dir=workdir)
    ) as tmp:
        base = save_checkpoint(
            Path(tmp) / "unquantized", {**others, **{k: RawTensor.of(v) for k, v in linear.items()}}
        )
        reference, _ = _load(base, [])
        ref_logits = forward(reference, tokens).numpy()
        rows = []
        for name, path, tolerance in twins(Path(tmp), linear, others):
            params, seconds = _load(path, [name])
            logits = forward(params, tokens).numpy()
            rows.append(row(name, path, seconds, params, reference, logits, ref_logits, tolerance))
    return rows


def twins(
    directory: Path, linear: Mapping[str, np.ndarray], others: Mapping[str, RawTensor]
) -> Iterator[tuple[str, Path, float]]:
    """(format, checkpoint directory, tolerance) of every installed format that can encode:
    each writes its quantized twin of ``linear`` (plus ``others``) into ``directory / format``.
    A format whose encoder declines (returns no tolerance) is skipped."""
    for name in registry.encoders():
        path = directory / name
        path.mkdir()
        tolerance = registry.encode(name, path, linear, others)
        if tolerance is not None:
            yield name, path, tolerance


def row(
    name: str,
    path: Path,
    seconds: float,
    params: dict[str, Any],
    reference: dict[str, Any],
    logits: np.ndarray,
    ref_logits: np.ndarray,
    tolerance: float,
    model: str = "a tiny Llama",
) -> DemoRow:
    """The table row of format ``name``: its checkpoint's size, load time, largest weight
    error against ``reference`` and logits cosine against ``ref_logits``."""
    error = max(float(np.abs(params[k].numpy() - reference[k].numpy()).max()) for k in params)
    size = sum(f.stat().st_size for f in path.iterdir())
    return DemoRow(name, size, seconds, error, cosine(logits, ref_logits), float(tolerance), model)


def print_table(rows: list[DemoRow]) -> None:
    """The demo table, on stdout."""
    from rich.table import Table

    from flexq.cli.console import console

    table = Table(
        "format",
        "bytes",
        "load",
        "max |w err|",
        "logits cos",
        "min cos",
        "result",
        title=f"flexq demo: {rows[0].model if rows else 'a tiny Llama'} in every installed "
        "format vs unquantized",
    )
    for r in rows:
        table.add_row(
            r.format,
            f"{r.checkpoint_bytes:,}",
            f"{r.load_seconds * 1000:.0f} ms",
            f"{r.max_weight_error:.2e}",
            f"{r.logits_cosine:.6f}",
            f"{r.tolerance}",
            "ok" if r.ok else "DRIFT",
        )
    console().print(table)
