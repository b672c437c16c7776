"""``flexq demo`` with PaddleFormers installed: a real PaddleFormers Llama in every format.

For newcomers who use PaddleFormers: a tiny ``LlamaForCausalLM`` (random
weights) is saved by PaddleFormers' own ``save_pretrained`` (the HF bf16
layout of the hub), once per installed format its linear weights are quantized
by the format's encoder, and each checkpoint is loaded with
:func:`flexq.paddleformers.from_pretrained`. Its logits are compared with
PaddleFormers' own ``from_pretrained`` of the unquantized checkpoint. Forwards
run in float32 (CPU Paddle has no bfloat16 matmul).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flexq.cli.demo import DemoRow, make_keep_dir, row, twins
from flexq.compose import composition_of
from flexq.io.writer import RawTensor
from flexq.paddleformers import from_pretrained

if TYPE_CHECKING:
    from collections.abc import Iterator

#: A small Llama with every structural feature the hub's have (GQA, untied lm_head).
CONFIG = {
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "tie_word_embeddings": False,
}
SEQ = 32
#: What the demo table says the rows were loaded into.
MODEL = "a PaddleFormers LlamaForCausalLM"


def available() -> bool:
    """Whether PaddleFormers can be imported here (imported quietly: see _quiet_import)."""
    try:
        with _quiet_import():
            import paddleformers.transformers  # noqa: F401
    except ImportError:
        return False
    return True


#: Third-party loggers that speak while PaddleFormers imports: transformers' "PyTorch
#: was not found" advice, PaddleFormers' warning that it hides PyTorch from transformers.
_IMPORT_LOGGERS = ("transformers", "PaddleFormers")


@contextmanager
def _quiet_import() -> Iterator[None]:
    """Below ERROR, nothing the demo's user did not ask about while PaddleFormers imports
    (``flexq --debug`` shows it all). Filters, not levels: PaddleFormers sets its
    logger's level when it is imported."""
    if logging.getLogger("flexq").isEnabledFor(logging.DEBUG):
        yield
        return

    def below_error(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR

    loggers = [logging.getLogger(name) for name in _IMPORT_LOGGERS]
    advisory = os.environ.get("TRANSFORMERS_NO_ADVISORY_WARNINGS")
    os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"  # read when the advice is given
    for logger in loggers:
        logger.addFilter(below_error)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(below_error)
        if advisory is None:
            del os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"]
        else:
            os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = advisory


def run(workdir: Path | None = None, keep: Path | None = None) -> list[DemoRow]:
    """Write, load and compare the Llama in every installed format that can encode.

    :param keep: write the checkpoints into this new (or empty) directory, one
        subdirectory per format plus ``bf16`` (the unquantized model), and leave them:
        each has PaddleFormers' own config.json (``architectures`` and all) plus its
        ``quantization_config``, so every API loads it.
    """
    import paddle
    from paddleformers.transformers import LlamaConfig, LlamaForCausalLM
    from paddleformers.utils.log import logger

    # PaddleFormers logs every parameter it saves or loads at INFO (``--debug`` shows them).
    if not logging.getLogger("flexq").isEnabledFor(logging.DEBUG):
        logger.set_level("WARNING")

    tokens = paddle.to_tensor(np.random.default_rng(1).integers(0, CONFIG["vocab_size"], (2, SEQ)))
    if keep is not None:
        make_keep_dir(keep)
    with (
        nullcontext(str(keep))
        if keep is not None
        else tempfile.TemporaryDirectory(prefix="flexq-demo-", dir=workdir)
    ) as tmp:
        base = Path(tmp) / "bf16"
        config = LlamaConfig(**CONFIG)
        config.dtype = "bfloat16"
        paddle.seed(0)
        with _default_dtype("bfloat16"):
            model = LlamaForCausalLM(config)
        model.save_pretrained(str(base))
        for stray in base.glob("saved_signal_*"):
            stray.unlink()  # PaddleFormers' multi-rank save marker, not part of the checkpoint
        reference = LlamaForCausalLM.from_pretrained(str(base), dtype="float32")
        ref_logits = _logits(reference, tokens)
        ref_params = reference.state_dict()
        linear, others = _split(base)
        rows = []
        for name, path, tolerance in twins(Path(tmp), linear, others):
            (path / "config.json").write_text(_with_quant(base, path))
            start = time.perf_counter()
            loaded = from_pretrained(LlamaForCausalLM, path, dtype="float32", progress=False)
            seconds = time.perf_counter() - start
            logits = _logits(loaded, tokens)
            params = loaded.state_dict()
            rows.append(
                row(name, path, seconds, params, ref_params, logits, ref_logits, tolerance, MODEL)
            )
    return rows


class _default_dtype:
    def __init__(self, dtype: str) -> None:
        self._dtype = dtype

    def __enter__(self) -> None:
        import paddle

        self._old = paddle.get_default_dtype()
        paddle.set_default_dtype(self._dtype)

    def __exit__(self, *exc: object) -> None:
        import paddle

        paddle.set_default_dtype(self._old)


def _logits(model: Any, tokens: Any) -> np.ndarray:
    import paddle

    if not paddle.is_compiled_with_cuda():
        model.config.fuse_rms_norm = False  # the fused RMSNorm kernel is GPU-only
    model.eval()
    with paddle.no_grad():
        out = model(tokens)
    logits = out[0] if isinstance(out, tuple) else getattr(out, "logits", out)
    return np.asarray(logits.astype("float32").numpy())


def _split(base: Path) -> tuple[dict[str, np.ndarray], dict[str, RawTensor]]:
    """(the linear ``*proj.weight`` tensors as float32, every other tensor as stored)."""
    ct = composition_of(base)
    linear, others = {}, {}
    for key, entry in ct.entries.items():
        if key.endswith("proj.weight") and len(entry.shape) == 2:
            linear[key] = ct.load(key, "float32")
        else:
            info = ct.checkpoint.info(key)
            others[key] = RawTensor(info.dtype, ct.checkpoint.read(key))
    return linear, others


def _with_quant(base: Path, twin: Path) -> str:
    """The base model's config.json with the twin's ``quantization_config``."""
    import json

    config = json.loads((base / "config.json").read_text())
    written = (
        json.loads((twin / "config.json").read_text()) if (twin / "config.json").exists() else {}
    )
    if "quantization_config" in written:
        config["quantization_config"] = written["quantization_config"]
    return json.dumps(config, indent=2)
