"""Run a worker script on two real CPU ranks, for the multi-rank tests.

:func:`launch_two_ranks` is the one ``paddle.distributed.launch --nproc_per_node 2`` of the
tests (tests/test_multirank.py, tests/test_kept_ranks.py, tests/native,
tests/paddleformers): CUDA hidden so Paddle's CPU build runs, a failure reported with
the tails of the launcher's output and of every rank's log; :func:`rank_arrays` reads
back the ``rank{r}.npz`` each worker saves.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def launch_two_ranks(
    worker: Path, args: Sequence[str], log_dir: Path, *, timeout: float = 300
) -> None:
    """``python -m paddle.distributed.launch --nproc_per_node 2 --log_dir LOG worker *args``.

    A rank that crashes leaves its trace in its log: Python's fault handler prints every
    thread's stack on a fatal signal, and glibc's fatal messages (a heap check's abort)
    go to stderr instead of a terminal no one reads.

    :raises AssertionError: when it does not exit 0, with the last 3000 characters of
        its stdout and stderr and the last 3000 of each rank's log (the launcher's own
        tail names the rank that failed).
    """
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env |= {"PYTHONFAULTHANDLER": "1", "LIBC_FATAL_STDERR_": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2",
         "--log_dir", str(log_dir), str(worker), *args],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip
    logs = "".join(
        f"\n--- {p.name} ---\n{p.read_text(errors='replace')[-3000:]}"
        for p in sorted(log_dir.glob("workerlog.*"))
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + logs


def rank_arrays(out: Path) -> list[dict[str, np.ndarray]]:
    """The arrays each of the two ranks saved as ``out/rank{r}.npz``."""
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(2)]
