"""``keep_quantized=True`` with ``tensor_model_parallel_size=2``, on 2 real CPU ranks.

One ``paddle.distributed.launch --nproc_per_node 2`` of tp_worker.py (its ``keep``
cases) per model: Llama from its FP8 16x16-block twin (one tiny head a block, as a
real model's 128 blocks are one 128-wide head). Pinned here:

- each rank's QuantizedLinear holds its block-aligned shard of the checkpoint's own
  bytes and scale blocks: column-parallel q/k/v/gate/up its rows (Shard on N),
  row-parallel o/down its columns (Shard on K, the partial sums all-reduced);
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

import flexq
import flexq.paddleformers

from .conftest import HEAD_BLOCKS, Checkpoints, model_class
from .test_paddleformers import logits
from .test_parallel import launch

pytestmark = pytest.mark.multirank

LLAMA = "LlamaForCausalLM"
TP2 = {"tensor_model_parallel_size": 2}
#: Llama's linears by the shard a rank holds (PaddleFormers' tp_plan).
STYLE = {"q": "column", "k": "column", "v": "column", "o": "row"}
STYLE |= {"gate": "column", "up": "column", "down": "row"}


def spec(tmp_path: Path, checkpoints: Checkpoints, fmts: list[str]) -> dict[str, Any]:
    cases = [
        {"label": fmt, "twin": str(checkpoints.twin(LLAMA, fmt)), "dtype": "float32"}
        | {"kwargs": TP2, "keep": True}
        for fmt in fmts
    ]
    return {"model": LLAMA, "hybrid": {"mp_degree": 2}, "out": str(tmp_path), "cases": cases}


@pytest.fixture(scope="module")
def launched(checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One launch for every case of this module (each launch starts two interpreters)."""
    out = tmp_path_factory.mktemp("kept-tp")
    launch(out, spec(out, checkpoints, [HEAD_BLOCKS, "fp8-b32"]))
    return out


def test_each_rank_holds_its_block_aligned_kept_shard(
    checkpoints: Checkpoints, launched: Path
) -> None:
    twin = checkpoints.twin(LLAMA, HEAD_BLOCKS)
    b = int(HEAD_BLOCKS.removeprefix("fp8-b"))
    ranks = [dict(np.load(launched / f"{HEAD_BLOCKS}-rank{r}.npz")) for r in range(2)]
    with flexq.Checkpoint(twin) as ckpt:
        for r, got in enumerate(ranks):
            layers = [k.removeprefix("values/") for k in got if k.startswith("values/")]
            assert len(layers) == 14  # 7 linears in each of 2 layers
            for name in layers:
                key = f"{name}.weight"
                values, scales = got[f"values/{name}"], got[f"scales/{name}"]
                n0, k0 = (int(v) for v in got[f"at/{name}"])
                style = STYLE[name.rsplit(".", 1)[-1].removesuffix("_proj")]
                assert str(got[f"style/{name}"]) == style
                n, k = values.shape
                whole = ckpt.read(key)
                # column: rank r holds rows r*N/2...; row: columns r*K/2...
                assert (n0, k0) == ((r * n, 0) if style == "column" else (0, r * k))
                assert whole.shape == ((2 * n, k) if style == "column" else (n, 2 * k))
                assert values.tobytes() == whole[n0 : n0 + n, k0 : k0 + k].tobytes()
                grid = ckpt.read(f"{key}_scale_inv")
                expected = grid[n0 // b : (n0 + n) // b, k0 // b : (k0 + k) // b]
                np.testing.assert_array_equal(scales, expected)


def test_tp_kept_logits_equal_the_tp_dequantized_and_the_one_rank_kept_models(
    checkpoints: Checkpoints, launched: Path
) -> None:
    ranks = [dict(np.load(launched / f"{HEAD_BLOCKS}-rank{r}.npz")) for r in range(2)]
    # Each rank holds its vocabulary shard of the logits.
    kept, dequantized = (
        np.concatenate([got[f"logits/{who}"] for got in ranks], axis=-1) for who in ("got", "ref")
    )
    np.testing.assert_array_equal(kept, dequantized)
    one = flexq.paddleformers.from_pretrained(
        model_class(LLAMA),
        checkpoints.twin(LLAMA, HEAD_BLOCKS),
        dtype="float32",
        keep_quantized=True,
    )
    one_rank = logits(one, LLAMA)
    assert kept.shape == one_rank.shape
    np.testing.assert_allclose(kept, one_rank, rtol=1e-5, atol=1e-5)


def test_a_shard_that_cuts_a_block_is_refused_on_every_rank(launched: Path) -> None:
    """k_proj: 2 kv heads of 16 rows, one a rank; with 32-row blocks rank r's rows
    16r..16r+16 cut the block."""
    for r in range(2):
        message = (launched / f"fp8-b32-rank{r}.refused").read_text()
        assert "k_proj.weight" in message, message
        assert f"at offset [{16 * r}, 0] (shape [16, 64])" in message, message
        assert "block [32, 32]" in message, message
        assert not (launched / f"fp8-b32-rank{r}.npz").exists()
