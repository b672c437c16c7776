"""Is torch DCP's ``QuantizedHuggingFaceStorageReader`` right on gpt-oss MXFP4 experts?

DCP's result is compared with flexq's bit-exact one, then both are timed in one
process. (The block-FP8 comparison of the defaults, one load per fresh process,
is :mod:`bench.fresh`.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import flexq
from bench.checkpoints import MXFP4_PREFIX, mxfp4_keys
from bench.timing import alternate, median


def torch_available() -> bool:
    """Whether torch (with DCP's quantized reader) can be imported."""
    try:
        import torch.distributed.checkpoint.quantized_hf_storage  # noqa: F401
    except ImportError:
        return False
    return True


def _dcp_load(
    path: Path, shapes: Mapping[str, tuple[int, ...]], fill: float | None = None
) -> Callable[[], dict[str, Any]]:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.quantized_hf_storage import (
        QuantizedHuggingFaceStorageReader,
    )

    state = {k: torch.empty(s, dtype=torch.float32) for k, s in shapes.items()}
    if fill is not None:
        for t in state.values():
            t.fill_(fill)

    def run() -> dict[str, Any]:
        reader = QuantizedHuggingFaceStorageReader(
            str(path), target_dtype=torch.float32, block_size=128
        )
        dcp.load(state, storage_reader=reader)
        return state

    return run


def _compose_load(path: Path, keys: list[str]) -> dict[str, np.ndarray]:
    ct = flexq.compose(path)
    try:
        return {k: ct.load(k, "float32") for k in keys}
    finally:
        ct.checkpoint.close()


def mxfp4_experts(path: Path, rounds: int) -> dict[str, Any]:
    """Is DCP's gpt-oss MXFP4 result right (vs flexq's bit-exact one)? Then both timed."""
    stored = mxfp4_keys()  # [E, out, in], as DCP decodes the blocks
    dcp_shapes = {k + "_blocks": s for k, s in stored.items()}
    # Targets start as NaN (no E2M1 x E8M0 value is NaN here): what DCP never wrote stays NaN.
    got = _dcp_load(path, dcp_shapes, fill=float("nan"))()
    want = _compose_load(path, list(stored))
    checks: dict[str, Any] = {}
    for key in stored:
        # DCP decodes the blocks as stored, [E, out, in]; flexq gives the logical [E, in, out].
        a, b = got[key + "_blocks"].numpy(), want[key].transpose(0, 2, 1)
        written = ~np.isnan(a)
        bad = np.argwhere(a != b)
        cols = np.flatnonzero(written.any(axis=(0, 1)))
        checks[key.removeprefix(MXFP4_PREFIX)] = {
            "shape": list(b.shape),
            "written_fraction": float(written.mean()),
            "written_columns": [int(cols.min()), int(cols.max()) + 1] if cols.size else None,
            "written_values_equal_flexq": bool(np.array_equal(a[written], b[written])),
            "bit_identical": bool(np.array_equal(a.view(np.uint32), b.view(np.uint32))),
            "mismatches": int(bad.shape[0]),
            "first_mismatch": (
                {"index": bad[0].tolist(), "dcp": float(a[tuple(bad[0])]),
                 "flexq": float(b[tuple(bad[0])])}
                if bad.size
                else None
            ),
        }  # fmt: skip
    del got, want
    times = alternate(
        {
            "torch_dcp": lambda: _dcp_load(path, dcp_shapes),
            "flexq_compose_numpy": lambda: lambda: _compose_load(path, list(stored)),
        },
        rounds,
    )
    medians = {k: median(v) for k, v in times.items()}
    return {
        "experts": next(iter(stored.values()))[0],
        "logical_shapes": {
            k.removeprefix(MXFP4_PREFIX): [e, i, o] for k, (e, o, i) in stored.items()
        },
        "rounds": rounds,
        "checks": checks,
        "dcp_correct": all(c["mismatches"] == 0 for c in checks.values()),
        "median_s": medians,
        "ratio_flexq_to_dcp": medians["flexq_compose_numpy"] / medians["torch_dcp"],
    }
