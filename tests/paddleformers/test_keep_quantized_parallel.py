"""``keep_quantized=True`` with ``tensor_model_parallel_size=2``, on 2 real CPU ranks.

One ``paddle.distributed.launch --nproc_per_node 2`` of tp_worker.py (its ``keep``
cases) for every model: Llama, ERNIE-4.5 (fused q, k, v and gate, up) and Phi-3
(stored-fused qkv_proj / gate_up_proj) from their FP8 16x16-block twins (one tiny
head a block, as a real model's 128 blocks are one 128-wide head), gpt-oss from its
MXFP4 twin (kept experts) and its FP8 twin (kept attention, with biases), and Llama
from its FP8 128-block twin (one block covers a tiny tensor: a per-tensor scale).
Pinned here:

- each rank's QuantizedLinear holds its block-aligned shard of the checkpoint's own
  bytes and scale blocks: column-parallel q/k/v/gate/up its rows (Shard on N),
  row-parallel o/down its columns (Shard on K, the partial sums all-reduced); a fused
  linear its own chunk of every part, as for dequantized weights (the one-rank kept
  model's values and scales, sliced as tests/paddleformers/test_parallel.py slices
  dequantized ones);
- the tensor-parallel kept logits equal flexq's dequantized tensor-parallel model's
  bit for bit (the same float32 matmuls and reduction), and the one-rank kept
  model's within reduction-order error;
- with 32x32 blocks a rank's k_proj shard (one 16-row head) cuts a block: refused on
  both ranks before any read, naming the tensor, the shard's offset and extent, and
  the block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddleformers")

import paddle

import flexq
import flexq.paddleformers
from flexq.nn import QuantizedLinear

from .conftest import HEAD_BLOCKS, Checkpoints, model_class
from .test_paddleformers import logits
from .test_parallel import fused_parts, launch, rank_slice

pytestmark = pytest.mark.multirank

LLAMA = "LlamaForCausalLM"
TP2 = {"tensor_model_parallel_size": 2}
#: label -> (model, twin): every case of the one launch.
CASES = {
    "llama": (LLAMA, HEAD_BLOCKS),
    "ernie": ("Ernie4_5ForCausalLM", HEAD_BLOCKS),
    "phi3": ("Phi3ForCausalLM", HEAD_BLOCKS),
    "gpt-oss": ("GptOssForCausalLM", "mxfp4"),
    # attention biases: split with a column-parallel linear, added after the all-reduce
    # of a row-parallel one
    "gpt-oss-fp8": ("GptOssForCausalLM", "fp8"),
    "llama-per-tensor": (LLAMA, "fp8"),
    "llama-b32": (LLAMA, "fp8-b32"),  # refused
}
LOADED = [label for label in CASES if label != "llama-b32"]
#: the shard a rank holds of each linear (PaddleFormers' tp_plan).
STYLE = {"q": "column", "k": "column", "v": "column", "qkv": "column", "o": "row"}
STYLE |= {"gate": "column", "up": "column", "gate_up": "column", "up_gate": "column"}
STYLE |= {"down": "row"}


@pytest.fixture(scope="module")
def launched(checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One launch for every case of this module (each launch starts two interpreters)."""
    out = tmp_path_factory.mktemp("kept-tp")
    cases = [
        {"label": label, "model": name, "twin": str(checkpoints.twin(name, fmt))}
        | {"dtype": "float32", "kwargs": TP2, "keep": True}
        for label, (name, fmt) in CASES.items()
    ]
    launch(out, {"model": LLAMA, "hybrid": {"mp_degree": 2}, "out": str(out), "cases": cases})
    return out


@pytest.fixture(scope="module")
def one_rank(checkpoints: Checkpoints) -> dict[str, Any]:
    """Each case's one-rank kept model."""
    from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd

    out = {}
    for label in LOADED:
        name, fmt = CASES[label]
        lsd._metadata_manager.clear()
        out[label] = flexq.paddleformers.from_pretrained(
            model_class(name), checkpoints.twin(name, fmt), dtype="float32", keep_quantized=True
        )
    return out


def ranks(launched: Path, label: str) -> list[dict[str, np.ndarray]]:
    return [dict(np.load(launched / f"{label}-rank{r}.npz")) for r in range(2)]


def rank_part(
    full: np.ndarray,
    key: str,
    at: tuple[int, int],
    shape: tuple[int, ...],
    r: int,
    parts: list[int],
    unit: int,
) -> np.ndarray:
    """Rank ``r``'s part of the one-rank kept ``[N, K]`` tensor ``full`` (values, ``unit``
    1, or scales, ``unit`` the block): test_parallel's slicing of the ``[in, out]`` layout."""
    n, k = (d * unit for d in shape)
    big_n, big_k = (d * unit for d in full.shape)
    box = np.array([[at[1], at[0]], [k, n], [big_k, big_n]]) // unit
    return rank_slice(full.T, key, box, r, [p // unit for p in parts]).T


@pytest.mark.parametrize("label", ["llama", "ernie", "phi3", "llama-per-tensor", "gpt-oss-fp8"])
def test_each_rank_holds_its_block_aligned_kept_shard(
    checkpoints: Checkpoints, launched: Path, one_rank: dict[str, Any], label: str
) -> None:
    name, fmt = CASES[label]
    single = {n: m for n, m in one_rank[label].named_sublayers() if isinstance(m, QuantizedLinear)}
    sharded = biased = 0
    for r, got in enumerate(ranks(launched, label)):
        layers = [k.removeprefix("values/") for k in got if k.startswith("values/")]
        assert sorted(layers) == sorted(single), (label, r)
        for layer in layers:
            values, scales = got[f"values/{layer}"], got[f"scales/{layer}"]
            at = tuple(int(v) for v in got[f"at/{layer}"])
            style = STYLE[layer.rsplit(".", 1)[-1].removesuffix("_proj")]
            assert str(got[f"style/{layer}"]) == style, layer
            one = single[layer]
            full = one.weight.view(paddle.uint8).numpy()
            k_at_n = (at[0], 0) if style == "column" else (0, at[1])
            assert at == k_at_n, layer  # column: Shard on N; row: Shard on K
            key = f"{layer}.weight"
            parts = fused_parts(name, key, full.T.shape, one_rank[label].config)
            want = rank_part(full, key, at, values.shape, r, parts, 1)
            assert values.tobytes() == want.tobytes(), (label, r, layer)
            grid = one.scales.numpy()
            if grid.ndim == 0:  # one scale a tensor (the 128-block twin of tiny layers)
                np.testing.assert_array_equal(scales, grid)
            else:
                b = one.form.block[0]
                np.testing.assert_array_equal(
                    scales, rank_part(grid, key, at, scales.shape, r, parts, b)
                )
            if one.bias is not None:
                # column-parallel: the shard's outputs; row-parallel: whole, added once
                bias = one.bias.numpy()
                want_bias = bias[at[0] : at[0] + values.shape[0]] if style == "column" else bias
                np.testing.assert_array_equal(got[f"bias/{layer}"], want_bias)
                biased += 1
            sharded += int(values.shape != full.shape)
    assert sharded == 2 * len(single)  # every kept linear is split
    assert biased == (2 * len(single) if label == "gpt-oss-fp8" else 0)
    if fmt == HEAD_BLOCKS and label == "llama":
        # and those are the checkpoint's own bytes, the one-rank kept model holds
        with flexq.Checkpoint(checkpoints.twin(name, fmt)) as ckpt:
            for layer, one in single.items():
                stored = ckpt.read(f"{layer}.weight")
                assert one.weight.view(paddle.uint8).numpy().tobytes() == stored.tobytes()


@pytest.mark.parametrize("label", LOADED)
def test_tp_kept_logits_equal_the_tp_dequantized_and_the_one_rank_kept_models(
    launched: Path, one_rank: dict[str, Any], label: str
) -> None:
    got = ranks(launched, label)
    # Each rank holds its vocabulary shard of the logits.
    kept, dequantized = (
        np.concatenate([g[f"logits/{who}"] for g in got], axis=-1) for who in ("got", "ref")
    )
    np.testing.assert_array_equal(kept, dequantized)
    single = logits(one_rank[label], CASES[label][0])
    assert kept.shape == single.shape
    np.testing.assert_allclose(kept, single, rtol=1e-5, atol=1e-5)


def test_gpt_oss_experts_stay_mxfp4_under_tensor_parallelism(launched: Path) -> None:
    """Attention and router stay float in gpt-oss's MXFP4 twin: no kept linear, and the
    logits above come from the kept experts."""
    for got in ranks(launched, "gpt-oss"):
        assert not [k for k in got if k.startswith("values/")]


def test_a_shard_that_cuts_a_block_is_refused_on_every_rank(launched: Path) -> None:
    """k_proj: 2 kv heads of 16 rows, one a rank; with 32-row blocks rank r's rows
    16r..16r+16 cut the block."""
    for r in range(2):
        message = (launched / f"llama-b32-rank{r}.refused").read_text()
        assert "k_proj.weight" in message, message
        assert f"at offset [{16 * r}, 0] (shape [16, 64])" in message, message
        assert "block [32, 32]" in message, message
        assert not (launched / f"llama-b32-rank{r}.npz").exists()
