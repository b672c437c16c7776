"""The hook specifications a flexq format plugin implements.

A format is a plugin object (usually a module) with functions named like the
hooks below, marked with :data:`flexq.hookimpl`. The core calls
:func:`flexq_quant_methods`, :func:`flexq_logical_metadata` and
:func:`flexq_recognized_keys` on every installed format, then routes each
per-tensor hook only to the format that claimed the logical tensor, so a format
never sees another format's keys. Calls go through pluggy's ``pm.hook``, so
``pm.trace`` / ``add_hookcall_monitoring`` see every one.

Arrays passed to :func:`flexq_apply` are either numpy arrays in the reader's
storage dtype (F8/F4/E8M0 as uint8, BF16 as uint16 bits; see
:mod:`flexq.io.dtypes`) or Paddle tensors (one-byte formats as uint8, BF16 as
bfloat16) on whatever device FlexCheckpoint put them. :mod:`flexq.formatkit`
gives one set of operations over both, so the math is written once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flexq.markers import NAME, hookimpl, hookspec

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence
    from pathlib import Path

    import numpy as np

    from flexq.io.checkpoint import Checkpoint
    from flexq.io.writer import RawTensor
    from flexq.plan import LogicalTensor, ReadPlan, TargetSlice

__all__ = ["API_ATTRIBUTE", "API_VERSION", "NAME", "hookimpl", "hookspec"]

#: The version of the contract between flexq and its format plugins (these hooks,
#: their arguments and results, and :mod:`flexq.formatkit`), as ``"major.minor"``. The
#: major number changes when a plugin written for the old contract can break (a hook's
#: or the kit's decode signature changes); the minor when something is only added. A
#: plugin declares the version it was built for (``Format(..., api_version="1.2")``,
#: or a module-level ``FLEXQ_API_VERSION = "1.2"``); one built for another major
#: version is disabled with one warning. A plugin that declares none predates the
#: number and is taken as built for major 1. 1.1 renamed eight kit names and kept the
#: old ones as aliases (:data:`flexq.formatkit.RENAMED`); 1.2 added :func:`flexq_apply`'s
#: ``rounded_out`` (``BoxSources.rounded_out`` in the kit).
API_VERSION = "1.2"

#: The attribute of a plugin object that holds the version it was built for.
API_ATTRIBUTE = "FLEXQ_API_VERSION"

# Every hook is called on one format at a time (the registry routes per-tensor
# hooks to the tensor's owner), so each returns that format's single answer.


@hookspec(firstresult=True)
def flexq_open_checkpoint(path: str) -> Checkpoint | None:
    """Open ``path`` when it is this format's own container (not a safetensors directory).

    For formats whose files are a different container (GGUF): return a
    :class:`~flexq.io.checkpoint.Checkpoint` subclass whose ``tensors`` present the
    container's tensors as header entries the core reads by box (byte ranges in
    the files), and whose ``config`` is the model's config.json as the format
    builds it. The core asks every format before it opens ``path`` as
    safetensors; the first one that opens it wins.

    :param path: the path (or repo id) the caller passed, as a string.
    :return: the opened checkpoint; None when ``path`` is not this format's container.
    :raises CheckpointError: when ``path`` is this format's container but malformed.
    """


@hookspec(firstresult=True)
def flexq_quant_methods() -> Collection[str] | None:
    """The ``quantization_config`` methods this format decodes.

    ``quant_method`` values as config.json spells them (``"fp8"``, ``"awq"``);
    compressed-tensors formats as ``"compressed-tensors/<format>"``
    (``"compressed-tensors/float-quantized"``). The core refuses a checkpoint
    whose config names a method no installed format claims, instead of passing
    its packed integers through.

    :return: the method names; None or empty for a format no config names.
    """


@hookspec(firstresult=True)
def flexq_logical_metadata(checkpoint: Checkpoint) -> Mapping[str, LogicalTensor] | None:
    """Claim the logical tensors this format builds from ``checkpoint``.

    Look at ``checkpoint.tensors`` (header entries) and ``checkpoint.config``;
    read no tensor data. Raise :class:`flexq.FormatError` for tensors that are
    clearly yours but broken (an F8 weight without a scale).

    :param checkpoint: the checkpoint being loaded.
    :return: logical key -> :class:`flexq.LogicalTensor`; None or {} if the
        format is not present. Each logical key must have exactly one owner.
    """


@hookspec(firstresult=True)
def flexq_recognized_keys(checkpoint: Checkpoint) -> Collection[str] | None:
    """Physical tensors that belong to this format whether or not a logical tensor uses them.

    The core reports a recognized key that no logical tensor consumes (an
    orphaned scale) as an error instead of passing it through silently.

    :return: physical keys, e.g. every ``*.weight_scale_inv``; None for none.
    """


@hookspec(firstresult=True)
def flexq_source_keys(checkpoint: Checkpoint, logical_key: str) -> Sequence[str] | None:
    """The physical tensors ``logical_key`` is built from (called on its owner only).

    :param logical_key: a key this format returned from flexq_logical_metadata.
    :return: physical keys present in ``checkpoint``, each used by this key
        only. Returning None for a key the format claimed is an error.
    """


@hookspec(firstresult=True)
def flexq_read_plan(
    checkpoint: Checkpoint, logical_key: str, target: TargetSlice, force_global: bool
) -> ReadPlan | None:
    """Plan the source boxes needed to produce the box ``target`` of ``logical_key``.

    Return a ``"local"`` plan that reads only what the box needs (including
    the quantization blocks that cover its edges), or a ``"global"`` plan. When
    ``force_global`` is true, return a global plan. Not implementing this hook
    means every load reads whole sources.

    :param target: the box of the logical tensor one rank wants.
    :param force_global: the loader needs the whole logical tensor.
    :return: the plan, or None to let the core read whole sources.
    """


@hookspec(firstresult=True)
def flexq_apply(
    checkpoint: Checkpoint,
    logical_key: str,
    sources: Mapping[str, Any],
    plan: ReadPlan,
    output_dtype: str,
    out: Any,
    rounded_out: Any,
) -> Any:
    """Decode: build the ``plan.target`` box of ``logical_key`` from ``sources``.

    The raw hook of the decode step, for plugins that are not a
    :class:`flexq.formatkit.Format` (which implements it over its ``decode``). Its name
    stays ``flexq_apply`` (a hook's name is part of kit API 1.x: renaming it would
    disable every raw-hook plugin); ``apply`` alone is only Paddle's ``LoadTransform``
    method.

    :param sources: source key -> array holding exactly the box the plan named
        (the whole tensor for a global plan); numpy or Paddle, see module doc.
        Numpy sources may be read-only views of the mapped file: read them,
        never write into them.
    :param plan: the plan the sources were read for.
    :param output_dtype: Paddle dtype name the caller wants.
    :param out: None, or a writable C-contiguous numpy float32 array of
        ``plan.target.local_shape`` (often the target's own memory): a format may
        write its float32 result into it and return it, which saves a copy.
        Ignoring it is always correct.
    :param rounded_out: None, or (when ``output_dtype`` is bfloat16) a writable
        C-contiguous numpy uint16 array of ``plan.target.local_shape`` for its bfloat16
        bits, often the target's own memory: a format
        whose math gives exactly what rounding its float32 result once would (the
        float32 value of each element rounded to nearest, ties to even; NaN as
        :data:`flexq.numerics.rounding.BF16_QUIET_NAN` with its sign) may write that
        into it and return it, which saves the float32 pass and the rounding's. Ignoring
        it is always correct (kit API 1.2).
    :return: an array of shape ``plan.target.local_shape`` on the sources'
        device, computed in float32. Return float32 and let the core round once
        to ``output_dtype``, or return ``output_dtype`` directly.
    """


@hookspec(firstresult=True)
def flexq_encode(
    directory: Path, weights: Mapping[str, np.ndarray], others: Mapping[str, RawTensor]
) -> float | None:
    """Write a checkpoint in this format (optional; used by ``flexq demo`` and tests).

    Quantize ``weights`` (HF names, float32 ``[out, in]`` linear weights) with the
    format's encoder, add ``others`` unchanged, and write the checkpoint with its
    config.json into ``directory`` (which exists and is empty).

    :return: the smallest cosine similarity between a model's logits with these
        weights and with the unquantized ones that the format promises (its
        documented tolerance); None when the format cannot encode.
    """
