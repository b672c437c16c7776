"""What ``flexq verify`` costs on the 1 GiB block-FP8 checkpoint (issue 27's bench).

``python -m bench.verify_cost [DIR]`` writes the checkpoint into DIR (a temporary
directory by default) and prints one JSON object:

- ``verify_read_fraction``: tensor bytes a default verify reads over the checkpoint's
  bytes (its headers, config and scales; the bar is < 1%), and ``verify_rchar_fraction``
  the same from ``/proc/self/io`` (every byte the process read, headers included);
- ``verify_s`` / ``load_s``: a default verify against a default load
  (``flexq.load_state_dict`` into bfloat16 Paddle targets) of the same checkpoint,
  both with its pages in the page cache (the bar is < 10%);
- ``sha256_s`` / ``sha256sum_s``: hashing every file (``--write-manifest``, 4 threads)
  against coreutils' ``sha256sum`` over the same files in the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.checkpoints import BIG_SIDE, fp8_keys, write_fp8_block

LINEARS = 64  # 64 x 4096 x 4096 FP8 = 1 GiB


def _rchar() -> int:
    with open("/proc/self/io") as fh:
        return int(next(line for line in fh if line.startswith("rchar")).split()[1])


def measure(directory: Path) -> dict[str, float]:
    """The figures above for the checkpoint written into ``directory / 'fp8'``."""
    import paddle

    import flexq

    ckpt = directory / "fp8"
    if not ckpt.exists():
        write_fp8_block(ckpt, LINEARS, side=BIG_SIDE)
    total = sum(p.stat().st_size for p in ckpt.iterdir())
    state = {k: paddle.zeros([BIG_SIDE, BIG_SIDE], dtype="bfloat16") for k in fp8_keys(LINEARS)}
    flexq.load_state_dict(state, ckpt)  # warm the page cache and the imports
    start = time.perf_counter()
    flexq.load_state_dict(state, ckpt)
    load_s = time.perf_counter() - start
    before = _rchar()
    start = time.perf_counter()
    report = flexq.verify(ckpt)
    verify_s = time.perf_counter() - start
    rchar = _rchar() - before
    assert not report.problems, report.problems
    manifest = directory / "manifest.json"
    start = time.perf_counter()
    flexq.verify(ckpt, write_manifest_to=manifest)
    sha256_s = time.perf_counter() - start
    files = sorted(str(p) for p in ckpt.iterdir())
    start = time.perf_counter()
    subprocess.run(["sha256sum", *files], check=True, stdout=subprocess.DEVNULL)
    sha256sum_s = time.perf_counter() - start
    return {
        "checkpoint_bytes": total,
        "verify_read_fraction": report.bytes_read / total,
        "verify_rchar_fraction": rchar / total,
        "verify_s": verify_s,
        "load_s": load_s,
        "verify_over_load": verify_s / load_s,
        "sha256_s": sha256_s,
        "sha256sum_s": sha256sum_s,
    }


def main() -> None:
    if len(sys.argv) > 1:
        figures = measure(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            figures = measure(Path(tmp))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
