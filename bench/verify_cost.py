"""What ``flexq verify`` costs on the 1 GiB block-FP8 checkpoint (issue 27's bench).

Run by ``nox -s bench`` (every series) and ``nox -s bench -- verify`` (this one
alone, writing bench/results/<date>-verify.json and the verify section of
docs/performance.md); ``python -m bench.verify_cost [DIR]`` prints the figures. The
checkpoint is written into DIR (a temporary directory by default). Figures:

- ``verify_read_fraction``: tensor bytes a default verify reads over the checkpoint's
  bytes (its headers, config and scales; the bar is < 1%), and ``verify_rchar_fraction``
  the same from ``/proc/self/io`` (every byte the process read, headers included);
- ``verify_s`` / ``load_s``: a default verify against a default load
  (``flexq.load_state_dict`` into bfloat16 Paddle targets) of the same checkpoint,
  alternating rounds, medians, its pages in the page cache (the bar is < 10%);
- ``sha256_s`` / ``sha256sum_s``: hashing every file (``--write-manifest``, 4 threads)
  against coreutils' ``sha256sum`` over the same files, alternating rounds, medians
  (the bar: disk speed, i.e. no slower than ``sha256sum``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.checkpoints import BIG_SIDE, fp8_keys, write_fp8_block
from bench.timing import alternate, median

LINEARS = 64  # 64 x 4096 x 4096 FP8 = 1 GiB
ROUNDS = 3
HEADING = "## flexq verify on the 1 GiB block-FP8 checkpoint (issue 27)"


def _rchar() -> int:
    with open("/proc/self/io") as fh:
        return int(next(line for line in fh if line.startswith("rchar")).split()[1])


def measure(directory: Path, rounds: int = ROUNDS) -> dict[str, float]:
    """The figures above for the checkpoint written into ``directory / 'fp8'``."""
    import paddle

    import flexq

    ckpt = directory / "fp8"
    if not ckpt.exists():
        write_fp8_block(ckpt, LINEARS, side=BIG_SIDE)
    total = sum(p.stat().st_size for p in ckpt.iterdir())
    state = {k: paddle.zeros([BIG_SIDE, BIG_SIDE], dtype="bfloat16") for k in fp8_keys(LINEARS)}
    before = _rchar()
    report = flexq.verify(ckpt)
    rchar = _rchar() - before
    assert not report.problems, report.problems

    def call(f: Callable[[], object]) -> Callable[[], Callable[[], object]]:
        return lambda: f

    loads = alternate(
        {
            "load": call(lambda: flexq.load_state_dict(state, ckpt)),
            "verify": call(lambda: flexq.verify(ckpt)),
        },
        rounds,
    )
    files = sorted(str(p) for p in ckpt.iterdir())
    manifest = directory / "manifest.json"
    hashes = alternate(
        {
            "sha256": call(lambda: flexq.verify(ckpt, write_manifest_to=manifest)),
            "sha256sum": call(
                lambda: subprocess.run(["sha256sum", *files], check=True, stdout=subprocess.DEVNULL)
            ),
        },
        rounds,
    )
    load_s, verify_s = median(loads["load"]), median(loads["verify"])
    sha256_s, sha256sum_s = median(hashes["sha256"]), median(hashes["sha256sum"])
    return {
        "checkpoint_bytes": total,
        "rounds": rounds,
        "verify_read_fraction": report.bytes_read / total,
        "verify_rchar_fraction": rchar / total,
        "verify_s": verify_s,
        "load_s": load_s,
        "verify_over_load": verify_s / load_s,
        "sha256_s": sha256_s,
        "sha256sum_s": sha256sum_s,
        "sha256_gbps": total / sha256_s / 1e9,
        "sha256sum_gbps": total / sha256sum_s / 1e9,
    }


def goals(f: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Issue 27's bars, from :func:`measure`'s figures."""
    return {
        "verify_reads": {
            "goal": "bytes a default verify reads / checkpoint bytes, 1 GiB block-FP8",
            "target": "< 1%",
            "measured": f"{f['verify_read_fraction']:.4%} of tensor bytes "
            f"({f['verify_rchar_fraction']:.4%} of all bytes the process read)",
            "met": max(f["verify_read_fraction"], f["verify_rchar_fraction"]) < 0.01,
        },
        "verify_time": {
            "goal": "default verify time / default load time (bfloat16 targets), same run",
            "target": "< 10%",
            "measured": f"{f['verify_over_load']:.1%} ({f['verify_s'] * 1000:.0f} ms / "
            f"{f['load_s'] * 1000:.0f} ms)",
            "met": f["verify_over_load"] < 0.10,
        },
        "verify_sha256": {
            "goal": "verify --write-manifest (sha256 of every file, 4 threads) vs "
            "sha256sum of the same files, same run",
            "target": "disk speed: no slower than sha256sum",
            "measured": f"{f['sha256_gbps']:.2f} GB/s ({f['sha256_s']:.2f} s) vs "
            f"{f['sha256sum_gbps']:.2f} GB/s ({f['sha256sum_s']:.2f} s)",
            "met": f["sha256_s"] <= f["sha256sum_s"],
        },
    }


def markdown(f: dict[str, Any], json_name: str) -> list[str]:
    """The verify section of docs/performance.md."""
    lines = [
        HEADING,
        "",
        f"`flexq.verify` of a {f['checkpoint_bytes'] / (1 << 30):.2f} GiB checkpoint (64 "
        f"linears 4096x4096, 128x128 blocks), pages cached, {f['rounds']} alternating "
        f"rounds, medians; figures in `{json_name}` (`nox -s bench -- verify`).",
        "",
    ]
    return [*lines, *goals_table(goals(f)), ""]


def goals_table(found: dict[str, dict[str, Any]]) -> list[str]:
    """A markdown table of goals (goal, target, measured, met), for a series' section."""
    lines = ["| goal | target | measured | met |", "| --- | --- | --- | --- |"]
    for g in found.values():
        lines.append(f"| {g['goal']} | {g['target']} | {g['measured']} | {g['met']} |")
    return lines


def main() -> None:
    if len(sys.argv) > 1:
        figures = measure(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            figures = measure(Path(tmp))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
