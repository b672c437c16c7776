"""``--model CLASS``: a PaddleFormers class's own tensor-parallel split of each weight.

For :func:`flexq.verify` with ``model=``. PaddleFormers 1.2.0 has no table of split
rules: each layer asks for one when it is built (``Linear.create(..., tp_plan=
"colwise" | "rowwise")``, its attention and MLP linears). The class is built here the
way :func:`flexq.paddleformers.from_pretrained` builds it (its config from the
checkpoint's config.json, ``no_init_weights`` + ``paddle.LazyGuard``: no storage),
whole (``tensor_model_parallel_size=1``), with every plan a linear asks for recorded
under the linear's name. A column-parallel linear's HF ``[out, in]`` weight splits its
dim 0 (``"column"``), a row-parallel one its dim 1 (``"row"``), as
:mod:`flexq.check.splits` names them. Weights the class builds outside
``Linear.create`` (embeddings, lm_head, experts) get no rule: they are not split by
tensor parallelism here; names the class fuses (``qkv_proj`` over ``q_proj`` ...)
match no checkpoint tensor and get none either.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from flexq.errors import FlexqError

if TYPE_CHECKING:
    from flexq.check.report import SplitKind
    from flexq.io.checkpoint import Checkpoint

EXAMPLES = "e.g. LlamaForCausalLM, GptOssForCausalLM"


def model_class(name: str) -> Any:
    """The PaddleFormers model class called ``name``.

    :raises FlexqError: when PaddleFormers is not installed, or has no such model class.
    """
    try:
        import paddleformers.transformers as pft
    except ImportError as exc:
        raise FlexqError(
            f"--model {name}: the split rules are PaddleFormers' and it is not installed "
            f"({exc}); pip install paddleformers==1.2.0, or use --tp N alone"
        ) from None
    try:
        cls = getattr(pft, name, None)
    except ImportError as exc:  # a lazy module that needs paddlefleet
        raise FlexqError(
            f"--model {name}: its module needs {exc.name or exc} (PaddleFormers' paddlefleet "
            f"models); use the plain-Paddle *Deprecated class"
        ) from None
    if not isinstance(cls, type) or getattr(cls, "config_class", None) is None:
        raise FlexqError(f"--model {name!r}: not a PaddleFormers model class ({EXAMPLES})")
    return cls


def split_rules(name: str, checkpoint: Checkpoint) -> dict[str, SplitKind]:
    """Weight name -> how PaddleFormers' class ``name`` splits it under tensor parallelism,
    for the model the checkpoint's config.json describes."""
    cls = model_class(name)
    import paddle
    from paddleformers.nn.linear import Linear
    from paddleformers.transformers.model_utils import dtype_guard, no_init_weights

    from flexq.paddleformers import _concrete_class, _config, _dtype

    cls = _concrete_class(cls, checkpoint)
    config, kwargs = _config(cls, checkpoint, None, {})
    config.tensor_model_parallel_size = 1  # built whole: only the plans are wanted
    plans: dict[int, str] = {}
    create = Linear.__dict__["create"]
    signature = inspect.signature(create.__func__)

    def recording(kls: Any, *args: Any, **kw: Any) -> Any:
        layer = create.__func__(kls, *args, **kw)
        bound = signature.bind(kls, *args, **kw)
        bound.apply_defaults()
        plans[id(layer)] = str(bound.arguments["tp_plan"])
        return layer

    Linear.create = classmethod(recording)
    try:
        with no_init_weights(_enable=True), paddle.LazyGuard(), dtype_guard(_dtype(config, None)):
            model = cls(config, *(config["init_args"] or ()), **kwargs)
    except FlexqError:
        raise
    except Exception as exc:
        raise FlexqError(
            f"{checkpoint.path}: PaddleFormers' {cls.__name__} cannot be built from its "
            f"config.json ({type(exc).__name__}: {exc}); is it a {cls.__name__} checkpoint?"
        ) from None
    finally:
        Linear.create = create
    rules: dict[str, SplitKind] = {}
    for layer_name, layer in model.named_sublayers():
        plan = plans.get(id(layer))
        if plan is not None:
            rules[f"{layer_name}.weight"] = "column" if plan.endswith("colwise") else "row"
    return rules
