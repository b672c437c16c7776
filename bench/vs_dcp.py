"""flexq vs torch DCP's ``QuantizedHuggingFaceStorageReader``, one process, same checkpoint.

Block-FP8 into in-memory float32: DCP's ``dcp.load`` into preallocated torch
tensors, flexq's ``load_state_dict`` into preallocated Paddle tensors (both
engines) and ``compose(path).load`` into numpy (the dequantize path without
Paddle's tensor copies). Next to them, the machine's limit for the job: a memcpy
of the finished values into the same kind of targets, fresh (never touched, as
DCP's are) and initialised (already written, as a model's parameters are).
Then gpt-oss MXFP4 experts: DCP's result is compared with flexq's bit-exact
one before anything is timed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import flexq
from bench.checkpoints import MXFP4_PREFIX, SIDE, fp8_keys, mxfp4_keys
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


def _fresh_targets(keys: list[str]) -> dict[str, Any]:
    """New Paddle float32 targets, never touched: the load pays their page faults."""
    import paddle

    return {k: paddle.empty([SIDE, SIDE], dtype="float32") for k in keys}


def _initialized_targets(keys: list[str]) -> dict[str, Any]:
    """Paddle float32 targets already written once, as a model's parameters are after
    initialisation: no page faults left for the load."""
    import paddle

    return {k: paddle.zeros([SIDE, SIDE], dtype="float32") for k in keys}


def _flexq_load(
    path: Path,
    keys: list[str],
    engine: str,
    atomic: bool = True,
    state: dict[str, Any] | None = None,
) -> Callable[[], object]:
    state = _fresh_targets(keys) if state is None else state
    return lambda: flexq.load_state_dict(
        state,
        path,
        engine=engine,  # type: ignore[arg-type]
        atomic=atomic,
    )


def _memcpy_into(
    values: Mapping[str, np.ndarray], state: dict[str, Any] | None = None
) -> Callable[[], object]:
    """The machine's limit for the same job: copy the finished float32 values into
    targets of the same kind as flexq's (fresh unless ``state`` is given)."""
    state = _fresh_targets(list(values)) if state is None else state

    def run() -> None:
        for k, v in values.items():
            np.copyto(np.from_dlpack(state[k]), v)

    return run


def _compose_load(path: Path, keys: list[str]) -> dict[str, np.ndarray]:
    ct = flexq.compose(path)
    try:
        return {k: ct.load(k, "float32") for k in keys}
    finally:
        ct.checkpoint.close()


def fp8_block(path: Path, n: int, rounds: int) -> dict[str, Any]:
    """Median seconds of each contender on the block-FP8 checkpoint, ratios, equality."""
    keys = fp8_keys(n)
    shapes = {k: (SIDE, SIDE) for k in keys}
    got = _dcp_load(path, shapes)()
    want = _compose_load(path, keys)
    identical = all(np.array_equal(got[k].numpy(), want[k]) for k in keys)
    initialized = _initialized_targets(keys)
    times = alternate(
        {
            "torch_dcp": lambda: _dcp_load(path, shapes),
            "flexq_direct": lambda: _flexq_load(path, keys, "direct"),
            "flexq_direct_nonatomic": lambda: _flexq_load(path, keys, "direct", atomic=False),
            "flexq_flexcheckpoint": lambda: _flexq_load(path, keys, "flexcheckpoint"),
            "flexq_compose_numpy": lambda: lambda: _compose_load(path, keys),
            "memcpy_into_fresh": lambda: _memcpy_into(want),
            "flexq_direct_nonatomic_initialized": lambda: _flexq_load(
                path, keys, "direct", atomic=False, state=initialized
            ),
            "memcpy_into_initialized": lambda: _memcpy_into(want, initialized),
        },
        rounds,
    )
    medians = {k: median(v) for k, v in times.items()}
    dcp = medians["torch_dcp"]
    return {
        "tensors": n,
        "shape": [SIDE, SIDE],
        "output_bytes": n * SIDE * SIDE * 4,
        "rounds": rounds,
        "seconds": times,
        "median_s": medians,
        # DCP fills fresh targets: only the contenders that do the same compare.
        "ratio_to_dcp": {
            k: m / dcp
            for k, m in medians.items()
            if k != "torch_dcp" and not k.startswith("memcpy") and not k.endswith("initialized")
        },
        "dcp_equals_flexq": identical,
    }


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
