"""Multi-rank loads with real `paddle.distributed.launch` processes: every format on 2 CPU
ranks, and a DeepSeek-shaped block-FP8 MoE layer at 2 and 4 ranks and on 2 nodes x 2 ranks
(two launchers, master on loopback) in every parallel layout."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest

import flexq

from .multirank import moe
from .multirank.launch import launch_two_ranks, rank_arrays

WORKER = Path(__file__).parent / "multirank" / "worker_load.py"
pytestmark = pytest.mark.multirank


def launch(tmp_path: Path, ckpt: Path, engine: str, formats: str) -> list[dict[str, np.ndarray]]:
    out = tmp_path / f"out-{engine}"
    out.mkdir()
    launch_two_ranks(WORKER, [str(ckpt), str(out), engine, formats], tmp_path / f"log-{engine}")
    return rank_arrays(out)


def test_direct_engine_reads_exactly_each_ranks_plan_slices(
    tmp_path: Path, int8row_ckpt: Path
) -> None:
    ranks = launch(tmp_path, int8row_ckpt, "direct", "int8row")
    ct = flexq.compose(int8row_ckpt, ["int8row"])
    expected = 0
    for entry in ct.entries.values():
        if entry.is_passthrough:
            continue
        rows, cols = entry.shape
        # Replicate: everything; Shard(0): half the rows and their scales; Shard(1): half
        # the columns of every row and every row's scale.
        expected += (rows * cols + rows * 4) + (rows // 2 * cols + rows // 2 * 4)
        expected += rows * (cols // 2) + rows * 4
    for got in ranks:
        assert int(got["__bytes_read__"]) == expected


@pytest.mark.parametrize("engine", ["direct", "flexcheckpoint"])
def test_every_format_loads_exact_shards_on_two_ranks(
    tmp_path: Path, format_ckpt: tuple[str, Path], engine: str
) -> None:
    name, ckpt = format_ckpt
    ranks = launch(tmp_path, ckpt, engine, name)
    ct = flexq.compose(ckpt, [name])
    linear = sorted(k for k, e in ct.entries.items() if not e.is_passthrough)
    for i, key in enumerate(linear):
        full = ct.load(key, "float32")
        rows, cols = full.shape
        for r, got in enumerate(ranks):
            np.testing.assert_array_equal(got[f"w{i}.r"], full)
            np.testing.assert_array_equal(
                got[f"w{i}.s0"], full[r * rows // 2 : (r + 1) * rows // 2]
            )
            np.testing.assert_array_equal(
                got[f"w{i}.s1"], full[:, r * cols // 2 : (r + 1) * cols // 2]
            )
    if engine == "direct":
        # Each rank reads exactly the boxes its plans name (the formats' own property
        # tests bound those boxes by the shard plus the blocks covering its edges),
        # plus what its format reads while finding the tensors (bitsandbytes' quant
        # state blobs; zero for the other formats).
        detection = flexq.compose(ckpt, [name]).checkpoint.bytes_read
        for got in ranks:
            planned = int(got["__planned_bytes__"])
            assert int(got["__bytes_read__"]) == planned + detection
            assert planned > 0


# --- The DeepSeek-shaped MoE layer (tests/multirank/moe.py) at 2 and 4 ranks and 2 nodes x 2 ranks.
# One launch per world runs every layout, both engines, the tuple-keyed multi-shard targets
# and (2 nodes) the files-visible-to-some-ranks case, so CI pays for four launches in all.

MOE_WORKER = Path(__file__).parent / "multirank" / "worker_moe.py"
#: The file node 1's partial copy lacks: experts 2-3, which ranks 2 and 3 hold under EP.
MISSING = "model-00004-of-00004.safetensors"


def free_port() -> int:
    """A loopback port nothing listens on now (the launchers' master binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_launchers(out: Path, nodes: list[tuple[Path, str]], nproc: int) -> list[dict[str, Any]]:
    """Start one ``paddle.distributed.launch`` per node (several: ``--nnodes`` with a master
    on loopback), each given its node's checkpoint copy and partial copy; return every
    rank's figures and arrays, by global rank."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nproc)]
    if len(nodes) > 1:
        cmd += ["--nnodes", str(len(nodes)), "--master", f"127.0.0.1:{free_port()}"]
    procs = []
    for n, (ckpt, partial) in enumerate(nodes):
        node = cmd + (["--rank", str(n)] if len(nodes) > 1 else [])
        node += ["--log_dir", str(out / f"log{n}"), str(MOE_WORKER), str(ckpt), partial, str(out)]
        procs.append(
            subprocess.Popen(node, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    outputs = [p.communicate(timeout=600)[0].decode(errors="replace") for p in procs]
    logs = "".join(f.read_text(errors="replace") for f in sorted(out.glob("log*/*")) if f.is_file())
    assert all(p.returncode == 0 for p in procs), "".join(outputs)[-3000:] + logs[-6000:]
    world = nproc * len(nodes)
    ranks = []
    for r in range(world):
        figures = json.loads((out / f"rank{r}.json").read_text())
        assert figures["world"] == world
        figures["values"] = dict(np.load(out / f"rank{r}.npz"))
        ranks.append(figures)
    return ranks


def node_copy(src: Path, dst: Path, leave_out: str | None = None) -> Path:
    """A node's own copy of the checkpoint (optionally without one of its files)."""
    skipped = [] if leave_out is None else [leave_out]
    shutil.copytree(src, dst, ignore=lambda _dir, names: [n for n in names if n in skipped])
    return dst


@pytest.fixture(scope="module")
def moe_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return moe.write(tmp_path_factory.mktemp("moe") / "ckpt")


@pytest.fixture(scope="module")
def two_ranks(moe_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_launchers(tmp_path_factory.mktemp("two"), [(moe_ckpt, "-")], 2)


@pytest.fixture(scope="module")
def four_ranks(moe_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_launchers(tmp_path_factory.mktemp("four"), [(moe_ckpt, "-")], 4)


@pytest.fixture(scope="module")
def two_nodes(moe_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """2 nodes x 2 ranks, each node with its own copy; node 1's partial copy lacks MISSING."""
    root = tmp_path_factory.mktemp("nodes")
    nodes = [
        (node_copy(moe_ckpt, root / f"node{n}" / "ckpt"), str(root / f"node{n}" / "partial"))
        for n in range(2)
    ]
    node_copy(moe_ckpt, Path(nodes[0][1]))
    node_copy(moe_ckpt, Path(nodes[1][1]), leave_out=MISSING)
    return run_launchers(root, nodes, 2)


WORLDS = ["two_ranks", "four_ranks", "two_nodes"]


def expected(case: str, world: int, rank: int) -> dict[str, tuple[str, moe.Box]]:
    """Array label -> (key, box) a rank holds in ``case``."""
    if case.startswith("multishard"):
        return {
            f"{k}@{','.join(map(str, box[0]))}": (k, box)
            for k, boxes in moe.multishard_boxes(world, rank).items()
            for box in boxes
        }
    return {k: (k, box) for k, box in moe.boxes(case, world, rank).items()}


def slice_of(full: np.ndarray, box: moe.Box) -> np.ndarray:
    offset, shape = box
    return full[tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))]


@pytest.fixture(scope="module")
def logical(moe_ckpt: Path) -> dict[str, dict[str, np.ndarray]]:
    """dtype -> key -> the whole logical tensor as one process loads it (as float32)."""
    ct = flexq.compose(moe_ckpt)
    out = {}
    for dtype in ("float32", "bfloat16"):
        out[dtype] = {
            k: paddle.to_tensor(ct.load(k, dtype)).astype("float32").numpy()
            if dtype == "bfloat16"
            else ct.load(k, dtype)
            for k in ct.entries
        }
    return out


@pytest.mark.parametrize("world", WORLDS)
def test_every_layout_is_exact_on_every_rank_and_reads_only_its_boxes(
    request: pytest.FixtureRequest, world: str, logical: dict[str, dict[str, np.ndarray]]
) -> None:
    """TP, EP, TP x EP, DP and tuple-keyed multi-shard targets (float32, bfloat16), both
    engines: every rank holds exactly the one-process values of its boxes, and
    LoadReport.bytes_read is exactly its boxes plus the scale blocks covering them."""
    ranks: list[dict[str, Any]] = request.getfixturevalue(world)
    seen = set()
    for rank, figures in enumerate(ranks):
        for load in figures["loads"]:
            if load["case"] == "partial-ep":
                continue
            seen.add((load["engine"], load["case"]))
            assert "error" not in load, load
            want = expected(load["case"], len(ranks), rank)
            assert set(load["arrays"]) == set(want), (rank, load["case"])
            dtype = "bfloat16" if load["case"].endswith("bfloat16") else "float32"
            for label, (key, box) in want.items():
                got = figures["values"][load["arrays"][label]]
                np.testing.assert_array_equal(got, slice_of(logical[dtype][key], box))
            boxes_bytes = sum(moe.box_bytes(k, b) for k, b in want.values())
            assert load["bytes_read"] == load["planned"] == boxes_bytes, (rank, load)
    layouts = [c for c in moe.LAYOUTS if c != "tpxep" or len(ranks) == 4]
    cases = [*layouts, "multishard-float32", "multishard-bfloat16"]
    assert seen == {(e, c) for e in ("direct", "flexcheckpoint") for c in cases}


def replicated_bytes() -> int:
    return sum(moe.box_bytes(k, ((0,) * len(s), s)) for k, s in moe.BF16.items())


@pytest.mark.parametrize("world", WORLDS)
def test_a_ranks_bytes_are_its_share_plus_replicated_and_one_scale_band(
    request: pytest.FixtureRequest, world: str
) -> None:
    """Per rank: TP reads 1/N of the split weights' elements plus at most one extra band of
    scale blocks per tensor; EP reads exactly its experts; DP reads everything (every
    replica reads the whole checkpoint itself: flexq sends no weights between ranks)."""
    ranks: list[dict[str, Any]] = request.getfixturevalue(world)
    n = len(ranks)
    dense = [moe.Q_PROJ, moe.O_PROJ, *moe.SHARED_KEYS.values()]
    whole = {k: moe.box_bytes(k, ((0, 0), s)) for k, s in moe.FP8.items()}
    elements = sum(math.prod(moe.FP8[k]) for k in dense)
    # One more band of blocks than 1/N of a tensor's scales: the blocks a cut goes through.
    band = sum(4 * -(-moe.FP8[k][0 if moe.is_row_parallel(k) else 1] // moe.BLOCK) for k in dense)
    scales = sum(whole[k] - math.prod(moe.FP8[k]) for k in dense)
    experts = sum(v for k, v in whole.items() if k not in dense)
    for figures in ranks:
        got = {(x["engine"], x["case"]): x for x in figures["loads"]}
        for engine in ("direct", "flexcheckpoint"):
            tp = got[engine, "tp"]["bytes_read"] - replicated_bytes()
            assert elements // n < tp <= elements // n + scales // n + band
            assert got[engine, "ep"]["bytes_read"] == replicated_bytes() + experts // n
            assert got[engine, "dp"]["bytes_read"] == replicated_bytes() + sum(whole.values())


def test_plan_work_per_rank_does_not_grow_with_the_world(
    moe_ckpt: Path,
    two_ranks: list[dict[str, Any]],
    four_ranks: list[dict[str, Any]],
    two_nodes: list[dict[str, Any]],
) -> None:
    """Every rank plans one piece per target box it holds, at 1, 2 and 4 ranks and on 2
    nodes: planning looks at this rank's boxes only, never at the other ranks'."""
    one = {
        k: paddle.zeros(list(s), dtype="float32")
        for k, s in moe.FP8.items()
        if k in moe.boxes("tp", 1, 0)
    }
    one.update({k: paddle.zeros(list(s), dtype="float32") for k, s in moe.BF16.items()})
    assert flexq.load_state_dict(one, moe_ckpt, engine="direct").pieces == 7
    for ranks in (two_ranks, four_ranks, two_nodes):
        for rank, figures in enumerate(ranks):
            for load in figures["loads"]:
                if load["case"] == "partial-ep":
                    continue
                assert load["pieces"] == len(expected(load["case"], len(ranks), rank))
                if load["case"] == "tp":
                    assert load["pieces"] == 7


def test_a_node_whose_copy_lacks_a_file_fails_before_any_write_naming_rank_and_file(
    two_nodes: list[dict[str, Any]], logical: dict[str, dict[str, np.ndarray]]
) -> None:
    """Node 1's copy lacks the file of experts 2-3. direct (no collective): node 0's ranks
    load exactly, node 1's ranks each fail naming themselves and the file. flexcheckpoint
    (collective): every rank fails with one error naming ranks 2 and 3 and the file, none
    waits for the others, and no target is written anywhere."""
    for rank, figures in enumerate(two_nodes):
        got = {x["engine"]: x for x in figures["loads"] if x["case"] == "partial-ep"}
        direct, fc = got["direct"], got["flexcheckpoint"]
        if rank < 2:
            assert "error" not in direct
            for label, (key, box) in expected("ep", 4, rank).items():
                value = figures["values"][direct["arrays"][label]]
                np.testing.assert_array_equal(value, slice_of(logical["float32"][key], box))
        else:
            assert direct["error"].startswith(f"CheckpointError: rank {rank} of 4 (host ")
            assert f"file {MISSING!r} is missing" in direct["error"]
        assert fc["error"].startswith("CheckpointError: rank 2 of 4 (host ")
        assert "; rank 3 of 4 (host " in fc["error"]
        assert MISSING in fc["error"]
        assert "no rank was written" in fc["error"]
        failed = [fc] if rank < 2 else [direct, fc]
        for load in failed:
            for name in load["arrays"].values():
                assert not figures["values"][name].any(), (rank, load["engine"])
