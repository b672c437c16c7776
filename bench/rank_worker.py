"""One rank of the 2-rank bytes-read bench (started by paddle.distributed.launch from bench.ranks).

Usage: ``rank_worker.py CKPT OUT ENGINE N``. Loads every linear as a Shard(0)
dist tensor and writes ``OUT/rank<N>.json`` with this rank's seconds and bytes read.

Bytes read: the direct engine counts them itself (``LoadReport.bytes_read``:
every byte copied out of the files). Paddle 3.3.1 does not count what the
flexcheckpoint engine reads, and page-cache reads do not show in
/proc/self/io, so ``paddle.load`` is wrapped: 3.3.1 reads each file assigned
to this rank whole with it, and the wrapper adds up the tensor bytes returned.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import paddle
import paddle.distributed as dist

import flexq

_loaded = {"bytes": 0, "files": 0}


def count_paddle_loads() -> None:
    """Wrap ``paddle.load`` to add up the bytes of every safetensors file it returns."""
    original = paddle.load

    def counting(path: str, *args: Any, **kwargs: Any) -> Any:
        result = original(path, *args, **kwargs)
        if str(path).endswith(".safetensors"):
            _loaded["files"] += 1
            _loaded["bytes"] += sum(int(v.numel()) * v.element_size() for v in result.values())
        return result

    paddle.load = counting


def cuda_shim() -> None:
    """TEST-ONLY shim: 3.3.1's reshard communicators call .cuda() unconditionally; on a
    CPU-only build make it (and pin_memory) a no-op so resharding can run."""
    paddle.Tensor.cuda = lambda self, *args, **kwargs: self
    paddle.Tensor.pin_memory = lambda self, *args, **kwargs: self


def main(ckpt: str, out: str, engine: str, n: int) -> None:
    from bench.checkpoints import SIDE, fp8_keys

    if engine == "flexcheckpoint":
        cuda_shim()
    count_paddle_loads()
    dist.init_parallel_env()
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    state = {
        k: dist.shard_tensor(paddle.zeros([SIDE, SIDE], dtype="float32"), mesh, [dist.Shard(0)])
        for k in fp8_keys(n)
    }
    start = time.perf_counter()
    report = flexq.load_state_dict(state, ckpt, engine=engine)  # type: ignore[arg-type]
    seconds = time.perf_counter() - start
    figures = {
        "rank": dist.get_rank(),
        "seconds": seconds,
        "bytes_read_flexq": report.bytes_read,
        "bytes_read_paddle_load": _loaded["bytes"],
        "files_loaded_by_paddle": _loaded["files"],
    }
    Path(out, f"rank{dist.get_rank()}.json").write_text(json.dumps(figures))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
