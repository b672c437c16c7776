"""Multi-rank loads with real `paddle.distributed.launch` processes (2 CPU ranks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import flexq

WORKER = Path(__file__).parent / "multirank" / "worker_load.py"
pytestmark = pytest.mark.multirank


def launch(tmp_path: Path, ckpt: Path, engine: str, formats: str) -> list[dict[str, np.ndarray]]:
    out = tmp_path / f"out-{engine}"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "paddle.distributed.launch",
            "--nproc_per_node",
            "2",
            "--log_dir",
            str(tmp_path / f"log-{engine}"),
            str(WORKER),
            str(ckpt),
            str(out),
            engine,
            formats,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    logs = "".join(
        p.read_text() for p in sorted((tmp_path / f"log-{engine}").glob("*")) if p.is_file()
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + logs[-5000:]
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(2)]


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
