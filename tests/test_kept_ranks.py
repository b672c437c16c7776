"""Keep-quantized loads on 2 launched ranks (issue 26), on every engine: FP8 block (float32
and E8M0 scales), MXFP4 (gpt-oss experts and compressed-tensors) and NVFP4 (ModelOpt) kept
targets, Shard(0) and Shard(1), as ShardedWeight parts and as dist tensors, stacked
experts split on E, each loaded in one call with ordinary (dequantized) targets. Each
rank gets its slice of the checkpoint's bytes, exact scales, and reads exactly its
blocks; a shard that cuts a block is refused before any read, with one agreed error on
every rank where the engine communicates. One launch runs every case."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexq
from flexq import RawTensor
from flexq.io.checkpoint import Checkpoint
from flexq_fp8 import save_fp8_checkpoint
from flexq_mxfp4.encode import save_mxfp4_checkpoint
from flexq_nvfp4.encode import MODELOPT_NVFP4_CONFIG
from flexq_nvfp4.encode import quantize as nvfp4_quantize

from .multirank.launch import launch_two_ranks, rank_arrays

pytestmark = pytest.mark.multirank
WORKER = Path(__file__).parent / "multirank" / "worker_kept.py"
ENGINES = ("direct", "flexcheckpoint", "native")
NORM = "norm.weight"


def checkpoints(root: Path) -> dict[str, dict[str, Any]]:
    """Every kept form's checkpoint, each with a norm (and FP8 a dequantized weight) as
    its ordinary targets."""
    rng = np.random.default_rng(3)

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    norm = {NORM: RawTensor("F32", w(64))}
    fp8 = {"fp8.weight": w(128, 128), "odd.weight": w(128, 80), "experts.w": w(2, 64, 64)}
    fp8_dense = {**fp8, "dense.weight": w(64, 64)}
    nv = flexq.save_checkpoint(
        root / "nvfp4",
        {**norm, **nvfp4_quantize({"nv.weight": w(64, 128)}, layout="modelopt")},
        config={"quantization_config": MODELOPT_NVFP4_CONFIG},
    )
    paths = {
        "fp8": save_fp8_checkpoint(
            root / "fp8", fp8_dense, layout="block", block_size=(32, 32), others=norm
        ),
        "e8m0": save_fp8_checkpoint(
            root / "e8m0", fp8, layout="block", block_size=(32, 32), scale_dtype="U8", others=norm
        ),
        "gptoss": save_mxfp4_checkpoint(
            root / "gptoss", {"experts.gate_up_proj": w(2, 64, 64)}, layout="gpt-oss", others=norm
        ),
        "ctmx": save_mxfp4_checkpoint(root / "ctmx", {"ct.weight": w(64, 128)}, others=norm),
        "nvfp4": nv,
    }
    ordinary = {NORM: [64]}
    return {
        name: {
            "path": str(path),
            "ordinary": {**ordinary, "dense.weight": [64, 64]} if name == "fp8" else ordinary,
        }
        for name, path in paths.items()
    }


def case(
    ckpt: str,
    key: str,
    shape: list[int],
    grid: list[int],
    block: list[int],
    dim: int,
    parts: str,
    values: str = "float8_e4m3fn",
    scales: str = "float32",
) -> dict[str, Any]:
    return {
        "ckpt": ckpt,
        "key": key,
        "shape": shape,
        "grid": grid,
        "block": block,
        "dim": dim,
        "parts": parts,
        "values_dtype": values,
        "scales_dtype": scales,
        "global": ckpt == "nvfp4",
    }


FP8 = ("fp8", "fp8.weight", [128, 128], [4, 4], [32, 32])
GPT_OSS = ("gptoss", "experts.gate_up_proj", [2, 64, 32], [2, 64, 2], [1, 1, 16])
CT_MX = ("ctmx", "ct.weight", [64, 64], [64, 4], [1, 16])
NV = ("nvfp4", "nv.weight", [64, 64], [64, 8], [1, 8])
CASES = {
    **{f"fp8.s{d}.{p}": case(*FP8, d, p) for d in (0, 1) for p in ("sharded", "dist")},
    "fp8.experts.e.dist": case("fp8", "experts.w", [2, 64, 64], [2, 2, 2], [1, 32, 32], 0, "dist"),
    "e8m0.s0.sharded": case("e8m0", *FP8[1:], 0, "sharded", scales="uint8"),
    "e8m0.s1.dist": case("e8m0", *FP8[1:], 1, "dist", scales="uint8"),
    "e8m0.s1.f32": case("e8m0", *FP8[1:], 1, "sharded"),
    "gptoss.e.dist": case(*GPT_OSS, 0, "dist", "uint8", "uint8"),
    "gptoss.s1.sharded": case(*GPT_OSS, 1, "sharded", "uint8", "uint8"),
    "gptoss.s2.sharded": case(*GPT_OSS, 2, "sharded", "uint8", "uint8"),
    "ctmx.s0.dist": case(*CT_MX, 0, "dist", "uint8", "uint8"),
    "ctmx.s1.sharded": case(*CT_MX, 1, "sharded", "uint8", "float32"),
    "nv.s0.sharded": case(*NV, 0, "sharded", "uint8", "float8_e4m3fn"),
    "nv.s1.dist": case(*NV, 1, "dist", "uint8", "float8_e4m3fn"),
    # refused: both ranks' Shard(1) halves of [128, 80] cut a 32-column block; only rank
    # 1's box (starting half a block early) cuts one in the skewed split.
    "odd.s1.sharded": case("fp8", "odd.weight", [128, 80], [4, 3], [32, 32], 1, "sharded"),
    "skew.s1": case(*FP8, 1, "skew"),
}
REFUSED = ("odd.s1.sharded", "skew.s1")


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One 2-rank launch running every case on every engine."""
    root = tmp_path_factory.mktemp("kept-ranks")
    ckpts = checkpoints(root)
    for c in CASES.values():
        ct = flexq.compose(ckpts[c["ckpt"]]["path"])
        c["sources"] = list(ct.entries[c["key"]].sources)
        ct.checkpoint.close()
    spec = root / "cases.json"
    spec.write_text(json.dumps({"checkpoints": ckpts, "cases": CASES}))
    out = root / "out"
    out.mkdir()
    launch_two_ranks(WORKER, [str(spec), str(out)], root / "log", timeout=600)
    return {"checkpoints": ckpts, "ranks": rank_arrays(out)}


def stored(path: str, key: str) -> tuple[np.ndarray, str]:
    with Checkpoint(path) as ckpt:
        return ckpt.read(key), ckpt.info(key).dtype


def rank_box(c: dict[str, Any], rank: int) -> tuple[list[int], list[int]]:
    """The box of the kept values ``rank`` holds (as the worker builds it)."""
    local, offset = list(c["shape"]), [0] * len(c["shape"])
    local[c["dim"]] //= 2
    offset[c["dim"]] = rank * local[c["dim"]]
    return offset, local


def cut(a: np.ndarray, offset: list[int], local: list[int]) -> np.ndarray:
    return a[tuple(slice(o, o + n) for o, n in zip(offset, local, strict=True))]


def want(c: dict[str, Any], path: str, rank: int) -> dict[str, Any]:
    """The kept values bytes, scales and bytes read ``rank`` must get, from the stored
    tensors (values: the checkpoint's bytes, as kept; scales: the covering blocks)."""
    values, _ = stored(path, c["sources"][0])
    values = values.reshape(c["shape"])  # gpt-oss [E, N, G, 16] blocks merge to [E, N, K/2]
    scales, sdtype = stored(path, c["sources"][1])
    offset, local = rank_box(c, rank)
    block = c["block"]
    soffset = [o // b for o, b in zip(offset, block, strict=True)]
    slocal = [-(-(o + n) // b) - o // b for o, n, b in zip(offset, local, block, strict=True)]
    s = cut(scales, soffset, slocal)
    if c["scales_dtype"] == "float32" and sdtype in ("U8", "F8_E8M0"):
        s = np.exp2(s.astype(np.float32) - 127)  # E8M0 widened to float32, exactly
    elif c["scales_dtype"] == "float32" and sdtype == "BF16":
        s = (s.astype(np.uint32) << 16).view(np.float32)
    nbytes = math.prod(local) + s.size * (4 if sdtype == "F32" else 1)
    got: dict[str, Any] = {"values": cut(values, offset, local), "scales": s, "bytes": nbytes}
    if c["global"]:
        g, _ = stored(path, c["sources"][2])
        got["global"] = g.reshape(1)
        got["bytes"] += 4
    return got


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", [n for n in CASES if n not in REFUSED])
def test_each_rank_gets_its_kept_slice_exact_scales_and_reads_only_its_blocks(
    launched: dict[str, Any], engine: str, name: str
) -> None:
    c = CASES[name]
    ckpt = launched["checkpoints"][c["ckpt"]]
    one = flexq.compose(ckpt["path"])
    for rank, got in enumerate(launched["ranks"]):
        at = f"{engine}.{name}"
        assert f"{at}.error" not in got, str(got[f"{at}.error"])
        assert str(got[f"{at}.engine"]) == engine
        w = want(c, ckpt["path"], rank)
        assert np.array_equal(got[f"{at}.values"], w["values"]), (rank, "values")
        assert got[f"{at}.scales"].dtype == w["scales"].dtype or c["scales_dtype"] != "float32"
        assert np.array_equal(got[f"{at}.scales"], w["scales"]), (rank, "scales")
        if c["global"]:
            assert np.array_equal(got[f"{at}.global"], w["global"])
        # the ordinary targets of the same call: each rank's Shard(0) rows, dequantized
        for key, shape in ckpt["ordinary"].items():
            rows = shape[0] // 2
            full = one.load(key, "float32")
            assert np.array_equal(got[f"{at}.{key}"], full[rank * rows : (rank + 1) * rows])
        alone = int(got[f"{engine}.{c['ckpt']}.alone.bytes_read"])
        assert int(got[f"{at}.bytes_read"]) == alone + w["bytes"], rank
    one.checkpoint.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_shard_that_cuts_a_block_is_refused_on_every_rank_before_any_read(
    launched: dict[str, Any], engine: str
) -> None:
    """Both ranks' Shard(1) halves of [128, 80] cut a 32-column block: every rank refuses
    before reading the tensor and writes nothing (ordinary targets included). Where the
    engine communicates both ranks raise one agreed error naming both."""
    ranks = launched["ranks"]
    at = f"{engine}.odd.s1.sharded"
    errors = [str(got[f"{at}.error"]) for got in ranks]
    for rank, got in enumerate(ranks):
        assert not bool(got[f"{at}.read"]), rank
        assert bool(got[f"{at}.untouched"]), rank
        assert errors[rank].startswith("TargetError: rank "), errors[rank]
        assert "cuts the checkpoint's block [32, 32] along dim 1" in errors[rank]
    if engine == "direct":
        for rank, msg in enumerate(errors):
            assert msg.startswith(f"TargetError: rank {rank} of 2 (host "), msg
            assert f"offset [0, {40 * rank}]" in msg
            assert f"offset [0, {40 - 40 * rank}]" not in msg
            assert "this rank was not written" in msg
    else:
        assert errors[0] == errors[1]
        assert "rank 0 of 2" in errors[0]
        assert "; rank 1 of 2" in errors[0]
        assert "offset [0, 0]" in errors[0]
        assert "offset [0, 40]" in errors[0]
        assert "no rank was written" in errors[0]


@pytest.mark.parametrize("engine", ENGINES)
def test_one_ranks_misaligned_shard_stops_every_rank_where_the_engine_communicates(
    launched: dict[str, Any], engine: str
) -> None:
    """Only rank 1's box ([48, 112) of 128 columns) cuts a block. direct (no collective):
    rank 0 loads its aligned box, rank 1 refuses. flexcheckpoint and native: rank 0 would
    otherwise wait in Paddle's collective for rank 1; both raise the one agreed error
    naming rank 1, neither reads the tensor, nothing is written."""
    ranks = launched["ranks"]
    at = f"{engine}.skew.s1"
    ckpt = launched["checkpoints"]["fp8"]["path"]
    one = [str(ranks[1][f"{at}.error"])]
    assert "rank 1 of 2" in one[0]
    assert "offset [0, 48]" in one[0]
    assert "cuts the checkpoint's block [32, 32] along dim 1" in one[0]
    if engine == "direct":
        w = want(CASES["skew.s1"], ckpt, 0)
        assert np.array_equal(ranks[0][f"{at}.values"], w["values"])
    else:
        assert str(ranks[0][f"{at}.error"]) == one[0]
        assert "rank 0 of 2" not in one[0]
        assert "no rank was written" in one[0]
    for rank, got in enumerate(ranks):
        if f"{at}.error" in got:
            assert not bool(got[f"{at}.read"]), rank
            assert bool(got[f"{at}.untouched"]), rank
