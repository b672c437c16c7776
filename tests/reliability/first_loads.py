"""Make a fresh process's first flexq calls from several threads at once, and save what loaded.

For tests/test_reliability_plugins.py, run as a script in a new interpreter (so
discovery of the installed formats really is first):

    python first_loads.py OUT SPEC.json

SPEC.json lists loads ``[{"path": ..., "targets": {key: [shape, dtype]}}, ...]``;
each load gets its own thread, all released by one barrier into
``flexq.load_state_dict``. Thread ``i`` saves its targets as float32 to
``OUT/<i>.npz``, or its exception to ``OUT/<i>.err``.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import paddle

import flexq


def _load(i: int, spec: dict[str, Any], barrier: threading.Barrier, out: Path) -> None:
    targets = {
        key: paddle.zeros(shape, dtype=dtype) for key, (shape, dtype) in spec["targets"].items()
    }
    barrier.wait()
    try:
        flexq.load_state_dict(targets, spec["path"])
    except Exception as exc:  # reported to the test, which fails on it
        (out / f"{i}.err").write_text(f"{type(exc).__name__}: {exc}")
        return
    np.savez(out / f"{i}.npz", **{k: v.astype("float32").numpy() for k, v in targets.items()})


def main(out: Path, specs: list[dict[str, Any]]) -> None:
    barrier = threading.Barrier(len(specs))
    threads = [
        threading.Thread(target=_load, args=(i, spec, barrier, out)) for i, spec in enumerate(specs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()))
