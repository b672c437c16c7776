"""One rank of a parallel PaddleFormers load (started by ``paddle.distributed.launch``).

For tests/paddleformers/test_parallel.py. ``argv[1]`` is a JSON spec:
``{"model": class name, "hybrid": fleet hybrid_configs, "forward": bool, "out": dir,
"cases": [{"label", "twin", "dequantized", "dtype", "kwargs", "keep", "model"}]}``. For every case,
in one process: ``flexq.paddleformers.from_pretrained`` of the quantized twin
with PaddleFormers' own parallel settings (``kwargs``), then PaddleFormers' own
``from_pretrained`` of the twin's dequantized copy with the same settings; each
rank writes ``<label>-rank<r>.npz`` with both models' local parameters (``got/``,
``ref/``, raw bits), the box every parameter declares (``box/``: offset, local
shape, global shape) and, when ``forward``, both models' logits (this rank's
vocabulary shard). A ``keep`` case loads the twin with ``keep_quantized=True`` beside
flexq's dequantized load of it instead (:func:`kept_case`; its ``model`` may differ from
the spec's, so one launch serves several models).

TEST-ONLY shims, for this worker alone (flexq ships none of them):
- 3.3.1's reshard communicators call ``.cuda()`` unconditionally, which PaddleFormers'
  own load goes through: ``.cuda()`` / ``pin_memory()`` are no-ops here;
- gloo has no ``all_reduce`` on the calculation stream and the CPU build no
  ``c_identity`` kernel, which the tensor-parallel forwards call: the row-parallel
  sum is a plain ``paddle.distributed.all_reduce`` and ``c_identity`` (the identity
  of a forward) returns its input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
import paddle.distributed.collective as collective
from paddle.distributed import fleet
from paddle.distributed.fleet.layers.mpu import mp_ops

TOKENS = np.random.default_rng(0).integers(0, 128, (2, 12))


def _all_reduce(tensor: Any, op: Any = None, group: Any = None, *args: Any, **kw: Any) -> Any:
    dist.all_reduce(tensor, group=group)
    return tensor


def _identity(tensor: Any, group: Any = None, *args: Any, **kw: Any) -> Any:
    return tensor


def cpu_shims() -> None:
    """TEST-ONLY: see the module docstring."""
    paddle.Tensor.cuda = lambda self, *args, **kwargs: self
    paddle.Tensor.pin_memory = lambda self, *args, **kwargs: self
    for module in (mp_ops, collective):
        module._mp_allreduce = _all_reduce
        module._c_identity = _identity


def raw(t: Any) -> np.ndarray:
    """The tensor's bits (bfloat16 as int16, so equality is bitwise)."""
    return np.asarray((t.view(paddle.int16) if t.dtype == paddle.bfloat16 else t).numpy())


def logits(model: Any, name: str) -> np.ndarray:
    # gpt-oss's eval-mode MoE is wrong in PaddleFormers 1.2.0 (see test_paddleformers.py).
    model.train() if name == "GptOssForCausalLM" else model.eval()
    with paddle.no_grad():
        out = model(input_ids=paddle.to_tensor(TOKENS))
    value = out.logits if hasattr(out, "logits") else out[0]
    return np.asarray(value.astype("float32").numpy())


def main() -> None:
    spec = json.loads(sys.argv[1])
    cpu_shims()
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 1, "pp_degree": 1, **spec["hybrid"]}
    fleet.init(is_collective=True, strategy=strategy)

    import paddleformers.transformers as pft
    from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd

    import flexq.paddleformers

    cls = getattr(pft, spec["model"])
    rank = dist.get_rank()
    for case in spec["cases"]:
        if case.get("keep"):
            kept_case(getattr(pft, case.get("model", spec["model"])), spec, case, rank)
            continue
        lsd._metadata_manager.clear()
        got = flexq.paddleformers.from_pretrained(
            cls, case["twin"], dtype=case["dtype"], **case["kwargs"]
        )
        lsd._metadata_manager.clear()
        ref = cls.from_pretrained(case["dequantized"], dtype=case["dtype"], **case["kwargs"])
        lsd._metadata_manager.clear()
        arrays: dict[str, Any] = {}  # Any: numpy's savez stubs reject **dict[str, ndarray]
        refs = ref.sharded_state_dict()
        for key, w in got.sharded_state_dict().items():
            arrays[f"got/{key}"] = raw(w.local_tensor)
            arrays[f"ref/{key}"] = raw(refs[key].local_tensor)
            arrays[f"box/{key}"] = np.array([w.global_offset, w.local_shape, w.global_shape])
        if spec["forward"] and case["dtype"] == "float32":  # no bf16 matmul on CPU
            ref.config.fuse_rms_norm = False  # the fused kernel is GPU-only
            arrays["logits/got"] = logits(got, spec["model"])
            arrays["logits/ref"] = logits(ref, spec["model"])
        np.savez(Path(spec["out"]) / f"{case['label']}-rank{rank}.npz", **arrays)


def kept_case(cls: Any, spec: dict[str, Any], case: dict[str, Any], rank: int) -> None:
    """``keep_quantized=True`` with the parallel settings, beside flexq's dequantized load
    of the same twin: each kept linear's local values (bytes), scales and shard offset,
    both models' logits; or, when the kept load is refused, its message."""
    from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd

    import flexq
    import flexq.paddleformers
    from flexq.nn import QuantizedLinear

    out = Path(spec["out"]) / f"{case['label']}-rank{rank}"
    lsd._metadata_manager.clear()
    try:
        got = flexq.paddleformers.from_pretrained(
            cls, case["twin"], dtype=case["dtype"], keep_quantized=True, **case["kwargs"]
        )
    except flexq.TargetError as exc:
        out.with_suffix(".refused").write_text(str(exc))
        return
    lsd._metadata_manager.clear()
    ref = flexq.paddleformers.from_pretrained(
        cls, case["twin"], dtype=case["dtype"], **case["kwargs"]
    )
    arrays: dict[str, Any] = {}
    for name, layer in got.named_sublayers():
        if isinstance(layer, QuantizedLinear):
            arrays[f"values/{name}"] = layer.weight.view(paddle.uint8).numpy()
            arrays[f"scales/{name}"] = layer.scales.numpy()
            split = layer.split
            arrays[f"at/{name}"] = np.array(split.offset if split else (0, 0))
            arrays[f"style/{name}"] = np.array(split.style if split else "")
            if layer.bias is not None:
                arrays[f"bias/{name}"] = layer.bias.numpy()
    arrays["logits/got"] = logits(got, cls.__name__)
    arrays["logits/ref"] = logits(ref, cls.__name__)
    np.savez(out.with_suffix(".npz"), **arrays)


if __name__ == "__main__":
    main()
