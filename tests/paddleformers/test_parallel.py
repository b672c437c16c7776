"""flexq.paddleformers with PaddleFormers' own parallel settings, on 2 real CPU ranks.

One ``paddle.distributed.launch --nproc_per_node 2`` of tp_worker.py per model
family and layout; every rank loads the FP8 twin and a second format's twin (AWQ,
or MXFP4 for gpt-oss), float32 and bfloat16, with
``flexq.paddleformers.from_pretrained(..., tensor_model_parallel_size=2)`` (or
ERNIE-4.5-MoE's experts over the data group, ``moe_group="dp"``), and then
PaddleFormers' own ``from_pretrained`` of the dequantized twin with the same
settings. Pinned here:

- every rank's every parameter is bit-identical to its slice of the one-rank flexq
  load: its box of a plain tensor, its own chunk of gate followed by its own chunk of
  up in a fused ``up_gate_proj`` / ``gate_up_proj`` (what AOA's ``fused_ffn`` lays out
  for two shards), its own chunks of q, k and v in Phi-3's ``qkv_proj``
  (``fused_qkv_old``), its own heads of gpt-oss's ``sinks``;
- it is bit-identical to PaddleFormers' own parallel load too, except gpt-oss's
  ``sinks`` on rank 1, where PaddleFormers' own load is wrong (it gives every rank
  the sinks of heads 0-1);
- the tensor-parallel float32 forwards (Llama, ERNIE-4.5, gpt-oss, Phi-3) give the one-rank
  logits within reduction-order error, and exactly PaddleFormers' own parallel
  model's logits (gpt-oss: PaddleFormers' own, with rank 1's sinks wrong, is off).

ERNIE-4.5-MoE's MoE layer runs GPU-only kernels in its forward, so only its
parameters are compared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddleformers")

import flexq.paddleformers

from ..multirank.launch import launch_two_ranks
from .conftest import Checkpoints, model_class
from .test_paddleformers import NO_CPU_FORWARD, logits

WORKER = Path(__file__).parent / "tp_worker.py"
pytestmark = pytest.mark.multirank

#: (model, layout) -> (fleet hybrid_configs, PaddleFormers' from_pretrained settings).
#: ERNIE-4.5-MoE's experts follow ``moe_group``: over the model-parallel group (its
#: default) they are split across the two tensor-parallel ranks, i.e. TP x EP on 2 ranks.
LAYOUTS: dict[tuple[str, str], tuple[dict[str, int], dict[str, Any]]] = {
    ("LlamaForCausalLM", "tp"): ({"mp_degree": 2}, {"tensor_model_parallel_size": 2}),
    ("Ernie4_5ForCausalLM", "tp"): ({"mp_degree": 2}, {"tensor_model_parallel_size": 2}),
    ("Ernie4_5_MoeForCausalLM", "tp-ep"): (
        {"mp_degree": 2},
        {"tensor_model_parallel_size": 2, "moe_group": "mp"},
    ),
    ("Ernie4_5_MoeForCausalLM", "ep"): ({"dp_degree": 2}, {"moe_group": "dp"}),
    ("GptOssForCausalLM", "tp"): ({"mp_degree": 2}, {"tensor_model_parallel_size": 2}),
    ("Phi3ForCausalLM", "tp"): ({"mp_degree": 2}, {"tensor_model_parallel_size": 2}),
}
#: (format, dtype) loaded in every launch.
CASES = {
    name: [(fmt, "float32") for fmt in ("fp8", "mxfp4" if "GptOss" in name else "awq")]
    + [("fp8", "bfloat16")]
    for name, _ in LAYOUTS
}


def launch(tmp_path: Path, spec: dict[str, Any]) -> None:
    """tp_worker.py on two ranks with ``spec``, its logs in ``tmp_path/log``."""
    launch_two_ranks(WORKER, [json.dumps(spec)], tmp_path / "log", timeout=600)


def one_rank(checkpoints: Checkpoints, name: str, fmt: str, dtype: str) -> Any:
    """The one-rank flexq load of the twin (the model every rank's slice comes from)."""
    from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd

    lsd._metadata_manager.clear()
    return flexq.paddleformers.from_pretrained(
        model_class(name), checkpoints.twin(name, fmt), dtype=dtype
    )


def raw(t: Any) -> np.ndarray:
    import paddle

    return np.asarray((t.view(paddle.int16) if t.dtype == paddle.bfloat16 else t).numpy())


def fused_parts(name: str, key: str, shape: tuple[int, ...], config: Any) -> list[int]:
    """Sizes of the parts a fused parameter of the one-rank model concatenates along its
    last axis, when a tensor-parallel rank holds its own chunk of every part (AOA's
    ``fused_ffn`` and ``fused_qkv_old`` over two shards); empty for any other parameter
    (ERNIE's ``fused_qkv`` groups heads, so a rank's box is a plain slice)."""
    if key.endswith((".up_gate_proj.weight", ".gate_up_proj.weight")):
        return [shape[-1] // 2] * 2  # gate, up
    if name == "Phi3ForCausalLM" and key.endswith("self_attn.qkv_proj.weight"):
        head = config.hidden_size // config.num_attention_heads
        kv = config.num_key_value_heads * head
        return [config.num_attention_heads * head, kv, kv]  # q, k, v
    return []


def rank_slice(
    full: np.ndarray, key: str, box: np.ndarray, rank: int, parts: list[int]
) -> np.ndarray:
    """What rank ``rank`` holds of the one-rank tensor ``full`` for parameter ``key``
    declared over ``box`` (offset, local shape, global shape); ``parts`` as
    :func:`fused_parts` gives them."""
    offset, local, whole = (tuple(int(v) for v in row) for row in box)
    if key.endswith(".self_attn.sinks"):
        # Declared replicated by PaddleFormers, built for the rank's own heads.
        n = local[0]
        return full[rank * n : (rank + 1) * n]
    if parts and local[-1] != whole[-1]:
        # This rank's chunk of every part, in order (gate then up; q, k, v).
        shards = whole[-1] // local[-1]
        i = offset[-1] // local[-1]
        starts = np.cumsum([0, *parts[:-1]])
        chunks = [
            full[..., start + i * size // shards : start + (i + 1) * size // shards]
            for start, size in zip(starts, parts, strict=True)
        ]
        return np.concatenate(chunks, axis=-1)
    return full[tuple(slice(o, o + n) for o, n in zip(offset, local, strict=True))]


@pytest.mark.parametrize(("name", "layout"), list(LAYOUTS))
def test_every_rank_holds_its_slice_of_the_one_rank_load(
    checkpoints: Checkpoints, tmp_path: Path, name: str, layout: str
) -> None:
    hybrid, kwargs = LAYOUTS[(name, layout)]
    forward = name not in NO_CPU_FORWARD
    cases = [
        {
            "label": f"{fmt}-{dtype}",
            "twin": str(checkpoints.twin(name, fmt)),
            "dequantized": str(checkpoints.dequantized(name, fmt)),
            "dtype": dtype,
            "kwargs": kwargs,
        }
        for fmt, dtype in CASES[name]
    ]
    spec = {"model": name, "hybrid": hybrid, "forward": forward, "out": str(tmp_path)}
    launch(tmp_path, {**spec, "cases": cases})

    for fmt, dtype in CASES[name]:
        single = one_rank(checkpoints, name, fmt, dtype)
        full = {k: raw(w.local_tensor) for k, w in single.sharded_state_dict().items()}
        ranks = [dict(np.load(tmp_path / f"{fmt}-{dtype}-rank{r}.npz")) for r in range(2)]
        keys = [{k.removeprefix("box/") for k in got if k.startswith("box/")} for got in ranks]
        # Together the ranks hold every parameter of the one-rank model.
        assert keys[0] | keys[1] == set(full), (fmt, dtype)
        sharded = fused = sinks = 0
        for r, got in enumerate(ranks):
            for key in sorted(keys[r]):
                box, mine, theirs = got[f"box/{key}"], got[f"got/{key}"], got[f"ref/{key}"]
                where = f"{name} {layout} {fmt} {dtype} rank {r}: {key}"
                parts = fused_parts(name, key, full[key].shape, single.config)
                np.testing.assert_array_equal(
                    mine, rank_slice(full[key], key, box, r, parts), err_msg=where
                )
                sharded += int(tuple(box[1]) != tuple(box[2]))
                fused += int(bool(parts) and mine.shape != full[key].shape)
                if key.endswith(".self_attn.sinks"):
                    sinks += 1
                    # PaddleFormers' own load gives every rank the sinks of heads 0, 1, ...
                    np.testing.assert_array_equal(theirs, full[key][: len(theirs)], err_msg=where)
                    if r:
                        assert not np.array_equal(mine, theirs), where
                        continue
                np.testing.assert_array_equal(mine, theirs, err_msg=where)
        # The layout really is parallel: sharded parameters, or experts split over the ranks.
        if layout == "ep":
            assert sharded == 0, (fmt, dtype)
        else:
            assert sharded > 0, (fmt, dtype)
        if "ep" in layout:
            only = keys[0] ^ keys[1]
            assert only, (fmt, dtype)
            assert all(".experts." in k for k in only), (fmt, dtype)
        else:
            assert keys[0] == keys[1], (fmt, dtype)
        if name.startswith(("Ernie", "Phi3")) and layout != "ep":
            assert fused > 0, "no fused parameter was split across the ranks"
        if name == "GptOssForCausalLM":
            assert sinks == 2 * single.config.num_hidden_layers
        if forward and dtype == "float32":
            # Each rank holds its vocabulary shard of the logits.
            mine_logits, their_logits = (
                np.concatenate([got[f"logits/{who}"] for got in ranks], axis=-1)
                for who in ("got", "ref")
            )
            expected = logits(single, name)
            assert mine_logits.shape == expected.shape
            np.testing.assert_allclose(mine_logits, expected, rtol=1e-5, atol=1e-5)
            if sinks:
                # PaddleFormers' own model, with rank 1's sinks wrong, is off.
                assert not np.allclose(their_logits, expected, rtol=1e-3, atol=1e-3)
            else:
                np.testing.assert_array_equal(mine_logits, their_logits)


def test_a_parallel_setting_without_fleet_init_is_a_clear_error(checkpoints: Checkpoints) -> None:
    """PaddleFormers' own layers would fail with an AttributeError on ``None``."""
    with pytest.raises(flexq.FlexqError, match=r"tensor_model_parallel_size=2: .*fleet\.init"):
        flexq.paddleformers.from_pretrained(
            model_class("GptOssForCausalLM"),
            checkpoints.twin("GptOssForCausalLM", "fp8"),
            tensor_model_parallel_size=2,
        )
