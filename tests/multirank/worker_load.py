"""One rank of a multi-rank load (started by paddle.distributed.launch from test_multirank.py).

Usage: worker_load.py CKPT OUT ENGINE FORMAT. Loads three dist tensors (Shard(0),
Shard(1), Replicate) of every linear weight and writes this rank's local values
and bytes read to OUT/rank<N>.npz.
"""

from __future__ import annotations

import sys

import numpy as np
import paddle
import paddle.distributed as dist

import flexq

PLACEMENTS = {"s0": dist.Shard(0), "s1": dist.Shard(1), "r": dist.Replicate()}


def register_example() -> None:
    """Register the plugin-guide example format from its source tree (it is not installed)."""
    import importlib.util
    from pathlib import Path

    src = Path(__file__).parents[1] / "plugins/flexq-format-int8row/src/flexq_int8row/__init__.py"
    spec = importlib.util.spec_from_file_location("flexq_int8row", src)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    flexq.register_format(module, name="int8row")


def cuda_shim() -> None:
    """TEST-ONLY: 3.3.1's reshard communicators call .cuda() unconditionally; on a
    CPU-only build make it (and pin_memory) a no-op so resharding can run here."""
    paddle.Tensor.cuda = lambda self, *args, **kwargs: self
    paddle.Tensor.pin_memory = lambda self, *args, **kwargs: self


def main(ckpt: str, out: str, engine: str, formats: str) -> None:
    if engine == "flexcheckpoint":
        cuda_shim()
    if formats == "int8row":
        register_example()
    dist.init_parallel_env()
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    ct = flexq.compose(ckpt, [formats])
    linear = [k for k, e in ct.entries.items() if not e.is_passthrough]
    state: dict[str, paddle.Tensor] = {}
    statements = []
    for i, key in enumerate(sorted(linear)):
        for tag, placement in PLACEMENTS.items():
            name = f"w{i}.{tag}"
            statements.append(f"{key} -> {name}")
            zeros = paddle.zeros(list(ct.entries[key].shape), dtype="float32")
            state[name] = dist.shard_tensor(zeros, mesh, [placement])
    # One statement per target: AOA allows one logical tensor to feed several targets.
    report = flexq.load_state_dict(
        state,
        ckpt,
        aoa_config={"aoa_statements": statements},
        engine=engine,  # type: ignore[arg-type]
        formats=[formats],
    )
    arrays = {k: v._local_value().numpy() for k, v in state.items()}
    arrays["__bytes_read__"] = np.array(report.bytes_read)
    arrays["__planned_bytes__"] = np.array(report.planned_bytes)
    np.savez(f"{out}/rank{dist.get_rank()}.npz", **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:5])
