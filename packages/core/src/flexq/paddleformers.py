"""PaddleFormers models from quantized checkpoints, in one call.

For users of PaddleFormers (``pip install paddleformers==1.2.0``), whose own
``from_pretrained`` refuses pre-quantized hub checkpoints (FP8, AWQ, MXFP4)::

    from paddleformers.transformers import AutoModelForCausalLM
    import flexq.paddleformers

    model = flexq.paddleformers.from_pretrained(AutoModelForCausalLM, "Qwen/Qwen3-8B-FP8")

:func:`from_pretrained` does what ``model_class.from_pretrained(path)`` does
for an unquantized checkpoint: the config from ``config.json`` (its
``quantization_config`` is flexq's to decode, so PaddleFormers' own
quantization never sees it), the model built without a random init
(``no_init_weights`` + ``paddle.LazyGuard``, as PaddleFormers' low-memory path
does), ``dtype`` defaulting to the config's, and the weights filled by
:func:`flexq.load_state_dict` through the class's own HF -> Paddle conversion
rules (``_gen_aoa_config``). Every unquantized float tensor is cast to its
parameter's dtype (PaddleFormers adds one ``dtype=`` statement per parameter for
that; flexq casts floats itself and so keeps refusing integer tensors no format
decodes). :func:`load` fills a model that is already built.

Limits: models whose modules import ``paddlefleet`` (Qwen2/Qwen3/Qwen3-MoE,
DeepSeek-V3/V4, GLM4-MoE, Kimi-K2 in PaddleFormers 1.2.0) need that package,
which is not on the package index (``paddleformers[paddlefleet]`` wants
``paddlefleet==0.3.0``), so they are untested here; an Auto class that picks one
without it is a :class:`flexq.FlexqError`. PaddleFormers keeps plain-Paddle
versions as ``Qwen3ForCausalLMDeprecated`` / ``Qwen3MoeForCausalLMDeprecated``.
Tested (``nox -s paddleformers``): Llama, gpt-oss, ERNIE-4.5, ERNIE-4.5-MoE and Phi-3.
On CPU the fused RMSNorm kernel does not exist, so the config's
``fuse_rms_norm`` is set to False there.

Parallel models: PaddleFormers' own settings (``tensor_model_parallel_size``,
``moe_group``, ...) pass through ``kw``; each rank loads the boxes of its
``sharded_state_dict()``, fused parameters split per rank as AOA splits them
(:mod:`flexq.load.pieces`), and gpt-oss's ``sinks``, which PaddleFormers 1.2.0
declares replicated, as each rank's own heads (:func:`_own_heads`).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexq.compose import composition_of
from flexq.errors import FlexqError
from flexq.load.api import load_state_dict
from flexq.nn import swap
from flexq.nn.rules import for_kept
from flexq.plugin.manager import open_checkpoint

if TYPE_CHECKING:
    import os

    from flexq.io.checkpoint import Checkpoint
    from flexq.load.report import LoadReport

#: config.json sections that describe the checkpoint's quantization (flexq's to decode).
QUANT_SECTIONS = ("quantization_config", "compression_config")


def from_pretrained(
    model_class: Any,
    path: str | os.PathLike[str],
    *,
    dtype: str | None = None,
    config: Any = None,
    keep_quantized: bool = False,
    progress: bool = True,
    **kw: Any,
) -> Any:
    """Build ``model_class`` (a PaddleFormers model class or Auto class) from the
    checkpoint at ``path`` (a directory, a Hugging Face cache snapshot or a repo id).

    :param dtype: parameter dtype (``"bfloat16"``, ``"float32"``, ...); default
        the config's ``dtype`` / ``torch_dtype``, else Paddle's default dtype.
    :param config: a PaddleFormers ``PretrainedConfig`` to use instead of
        ``config.json`` (its ``quantization_config`` is reset: flexq decodes the
        checkpoint, PaddleFormers' own quantization must not run on top).
    :param keep_quantized: build each linear the checkpoint quantized as a
        :class:`flexq.nn.QuantizedLinear` holding the checkpoint's own values and scales
        (FP8 linears, fused ones included, and gpt-oss's MXFP4 experts as
        :mod:`flexq.nn.experts` keeps them; under ``tensor_model_parallel_size`` each
        rank's block-aligned shard, :mod:`flexq.nn.parallel`; see :mod:`flexq.nn.swap`
        for what is refused); ``dtype`` applies to everything else.
    :param progress: a bar of the bytes read on stderr, as PaddleFormers' own loading
        shows one (``False``: none).
    :param kw: config overrides and model ``__init__`` arguments, as PaddleFormers takes them.
    :raises FlexqError: on a checkpoint that does not fit the model or cannot be decoded.
    """
    import paddle
    from paddleformers.transformers.model_utils import dtype_guard, no_init_weights

    checkpoint = open_checkpoint(path)
    cls = _concrete_class(model_class, checkpoint)
    config, model_kwargs = _config(cls, checkpoint, config, kw)
    dtype = _dtype(config, dtype)
    if not paddle.is_compiled_with_cuda():
        config.fuse_rms_norm = False  # the fused kernel is GPU-only
    config.perform_initialization = False
    tp = int(getattr(config, "tensor_model_parallel_size", 1) or 1)
    if tp > 1:
        _hybrid_group(tp)  # before building: PaddleFormers' layers fail obscurely without it
    with no_init_weights(_enable=True), paddle.LazyGuard(), dtype_guard(dtype):
        model = cls(config, *(config["init_args"] or ()), **model_kwargs)
    if keep_quantized:
        _keep_quantized(model, checkpoint, dtype)
    load(model, checkpoint.path, progress=progress)
    return model


def load(model: Any, path: str | os.PathLike[str], *, progress: bool = False) -> LoadReport:
    """Fill a built PaddleFormers ``model`` in place from the checkpoint at ``path``.

    Uses the model class's conversion rules over its ``sharded_state_dict()``
    (so tensor-parallel shards get their own boxes); parameters without storage
    (built under ``paddle.LazyGuard``) are allocated once every check has passed.

    :param progress: a bar of the bytes read on stderr (off, as in ``load_state_dict``).
    :return: what :func:`flexq.load_state_dict` did.
    """
    rules = getattr(type(model), "_gen_aoa_config", None)
    if rules is None:
        raise FlexqError(
            f"{type(model).__name__} has no _gen_aoa_config: it is not a PaddleFormers "
            "model with HF conversion rules"
        )
    aoa = rules(model.config)
    targets = swap.targets(model, _own_heads(model.config, model.sharded_state_dict()))
    # One call for everything, kept gpt-oss experts included: a failure anywhere leaves
    # every parameter as it was (the load checks all before its first write).
    return load_state_dict(targets, path, aoa_config=for_kept(aoa, targets), progress=progress)


def _keep_quantized(model: Any, checkpoint: Checkpoint, dtype: str) -> None:
    """Swap in a QuantizedLinear for each linear whose weight the checkpoint quantized
    (under tensor parallelism, holding this rank's shard: :mod:`flexq.nn.parallel`)."""
    ct = composition_of(checkpoint.path)
    try:
        weights = _own_heads(model.config, model.sharded_state_dict())
        kept = swap.plan(model, ct, type(model)._gen_aoa_config(model.config), weights)
    finally:
        ct.checkpoint.close()
    swap.swap(model, kept, dtype)


def _own_heads(config: Any, targets: dict[str, Any]) -> dict[str, Any]:
    """``targets`` with gpt-oss's attention ``sinks`` declared as what they are.

    PaddleFormers 1.2.0 builds each rank's ``sinks`` for its own heads
    (``num_attention_heads // tensor_model_parallel_size`` of them) but declares them
    replicated, so its own tensor-parallel load gives every rank the sinks of heads
    0, 1, ... (wrong on rank >= 1) and the checkpoint's ``[num_heads]`` tensor does not
    fit the declared shape. Declared as this rank's slice of the heads, every rank
    loads its own heads' sinks.
    """
    from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight

    tp = int(getattr(config, "tensor_model_parallel_size", 1) or 1)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    if tp <= 1 or heads % tp:
        return targets
    local = heads // tp
    out = dict(targets)
    for key, w in targets.items():
        if key.endswith(".self_attn.sinks") and tuple(w.global_shape) == (local,):
            # This rank's place in the tensor-parallel (PaddleFormers' "mp") group.
            rank = max(int(_hybrid_group(tp).get_model_parallel_rank()), 0)
            out[key] = ShardedWeight(key, w.local_tensor, (local,), (heads,), (rank * local,))
    return out


def _hybrid_group(tp: int) -> Any:
    """fleet's hybrid communicate group, which PaddleFormers' parallel layers need."""
    from paddle.distributed import fleet

    try:
        hcg = fleet.get_hybrid_communicate_group()
    except AttributeError:  # fleet never initialized in this process
        hcg = None
    if hcg is None:
        raise FlexqError(
            f"tensor_model_parallel_size={tp}: PaddleFormers' tensor-parallel layers need "
            "fleet.init(is_collective=True, strategy=...) with hybrid_configs "
            f"mp_degree={tp} first, on every rank of a paddle.distributed.launch job"
        )
    return hcg


def _concrete_class(model_class: Any, checkpoint: Checkpoint) -> Any:
    """``model_class`` itself, or the class an Auto class picks for the checkpoint."""
    pick = getattr(model_class, "_get_model_class_from_config", None)
    if pick is None:
        return model_class
    if checkpoint.path.is_file() and checkpoint.config:
        # A container file (GGUF): the picker reads the config it built, from a scratch
        # directory (never beside the file).
        with tempfile.TemporaryDirectory() as scratch:
            built = Path(scratch) / "config.json"
            built.write_text(json.dumps(checkpoint.config))
            return _pick(pick, model_class, checkpoint, Path(scratch), built)
    config_file = checkpoint.path / "config.json"
    if not config_file.is_file():
        raise FlexqError(
            f"{checkpoint.path}: no config.json to pick a {model_class.__name__} class"
        )
    return _pick(pick, model_class, checkpoint, checkpoint.path, config_file)


def _pick(pick: Any, model_class: Any, checkpoint: Checkpoint, where: Path, config: Path) -> Any:
    try:
        return pick(str(where), str(config))
    except ImportError as exc:
        raise FlexqError(
            f"{checkpoint.path}: {model_class.__name__} picks a class whose module needs "
            f"{exc.name or exc} (PaddleFormers' paddlefleet models); install it, or use "
            "the plain-Paddle *Deprecated class"
        ) from None


def _config(
    cls: Any, checkpoint: Checkpoint, config: Any, kw: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """The PaddleFormers config and the remaining model ``__init__`` kwargs."""
    from paddleformers.quantization.quantization_config import QuantizationConfig

    if config is not None:
        config.quantization_config = QuantizationConfig()
        return config, kw
    doc = {k: v for k, v in checkpoint.config.items() if k not in QUANT_SECTIONS}
    if not doc:
        raise FlexqError(f"{checkpoint.path}: no config.json to build {cls.__name__} from")
    base = getattr(cls.config_class, "base_config_key", None)
    if base and isinstance(doc.get(base), dict):
        doc = doc[base]
    built, unused = cls.config_class.from_dict(doc, return_unused_kwargs=True, **kw)
    return built, unused


def _dtype(config: Any, dtype: str | None) -> str:
    """The parameter dtype, chosen and recorded on ``config`` as PaddleFormers does."""
    import paddle

    subs: list[Any] = [getattr(config, k, None) for k in (config.sub_configs or ())]
    subs = [s for s in subs if s is not None]
    if dtype is None:
        dtype = config.dtype or next((s.dtype for s in subs if getattr(s, "dtype", None)), None)
    if dtype is None:
        dtype = paddle.get_default_dtype()
    dtype = str(dtype).removeprefix("paddle.")
    for sub in subs:
        sub.dtype = dtype
    config.dtype = dtype
    return dtype
