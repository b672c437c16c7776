"""Find the bitsandbytes tensors of a checkpoint from its header inventory, blobs and config.json.

The format's ``analyze`` (memoized per :class:`flexq.Checkpoint`). The rules:

- A 4-bit parameter is claimed by its quant-state blob
  (``P.quant_state.bitsandbytes__nf4`` / ``__fp4``, a name only bitsandbytes
  writes), with or without a config; its blob is read here (see
  :mod:`flexq_bitsandbytes.quantstate`) and every companion must be present with
  the dtype and shape the blob implies, else :class:`flexq.FormatError`.
- An LLM.int8 weight is claimed by its ``X.SCB`` next to an I8 ``X.weight``.
- Every companion name (``*.absmax``, ``*.quant_map``, ``*.nested_*``, blobs,
  ``*.SCB``, ``*.weight_format``) is a recognized key, so a companion without
  its parameter is reported by the core as an orphan.
- With a bitsandbytes config, a ``*.weight`` that looks quantized but lacks its
  blob (U8 ``[k, 1]`` under ``load_in_4bit``) or its ``SCB`` (I8 under
  ``load_in_8bit``) is an error rather than a silent pass-through.
- A claimed tensor inside a module that ``llm_int8_skip_modules`` or
  ``modules_to_not_convert`` names contradicts the config: error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexq import Checkpoint, FormatError, TensorInfo
from flexq.formatkit import Analysis, IgnoreList, cached_per_checkpoint, natural_dtype
from flexq_bitsandbytes.config import FORMAT, SKIP_FIELDS, BnbConfig, parse
from flexq_bitsandbytes.layout import (
    ABSMAX,
    FOUR_BIT_SUFFIXES,
    NESTED_ABSMAX,
    NESTED_QUANT_MAP,
    QUANT_MAP,
    QUANT_STATE,
    SCB,
    WEIGHT_FORMAT,
    FourBit,
    Int8,
    Nested,
)
from flexq_bitsandbytes.quantstate import read_quant_state


@cached_per_checkpoint
def analyze(ckpt: Checkpoint) -> Analysis[FourBit | Int8]:
    """The bitsandbytes tensors of ``ckpt`` by logical key (4-bit or LLM.int8), and
    every physical key of this format, used or not (computed once per checkpoint).

    :raises FormatError: on broken blobs, missing or mis-shaped companions,
        quantized-looking weights without their state, or claimed tensors in
        modules the config lists as not quantized.
    """
    cfg = parse(ckpt)
    tensors: dict[str, FourBit | Int8] = {}
    recognized: set[str] = set()
    for key in ckpt.tensors:
        if QUANT_STATE in key:
            recognized.add(key)
            found: FourBit | Int8 = _four_bit(ckpt, key)
        elif key.endswith(SCB):
            recognized.add(key)
            found = _int8(ckpt, key)
        else:
            if _is_companion(ckpt, key, cfg):
                recognized.add(key)
            continue
        if found.key in tensors:
            raise FormatError(
                f"{ckpt.info(key).file}: tensor {found.key!r} has more than one "
                f"bitsandbytes quant state (format {FORMAT!r})"
            )
        tensors[found.key] = found
    if cfg is not None:
        _check_unclaimed(ckpt, cfg, tensors)
        _check_skipped(ckpt, tensors)
    return Analysis(tensors, frozenset(recognized))


def _is_companion(ckpt: Checkpoint, key: str, cfg: BnbConfig | None) -> bool:
    """Whether ``key`` is named like a bnb companion of a parameter of this checkpoint."""
    for suffix in (*FOUR_BIT_SUFFIXES, WEIGHT_FORMAT):
        if key.endswith(suffix):
            parent = key.removesuffix(suffix)
            if suffix == WEIGHT_FORMAT:
                parent += ".weight"
            return cfg is not None or parent in ckpt.tensors
    return False


def _four_bit(ckpt: Checkpoint, state_key: str) -> FourBit:
    key, _, _ = state_key.partition(QUANT_STATE)
    state = read_quant_state(ckpt, state_key)
    where = f"{ckpt.info(state_key).file}: 4-bit parameter {key!r} (format {FORMAT!r})"
    shape = tuple(state.shape)
    n = int(np.prod(shape, dtype=np.int64))
    blocks = -(-n // state.blocksize)
    _expect(ckpt, key, "U8", ((n + 1) // 2, 1), where, "packed codes")
    absmax_dtype = "U8" if state.nested else "F32"
    _expect(ckpt, key + ABSMAX, absmax_dtype, (blocks,), where, "absmax")
    _expect(ckpt, key + QUANT_MAP, "F32", (16,), where, "code book")
    nested = None
    if state.nested:
        assert state.nested_blocksize is not None
        assert state.nested_offset is not None
        groups = -(-blocks // state.nested_blocksize)
        _expect(ckpt, key + NESTED_ABSMAX, "F32", (groups,), where, "nested absmax")
        _expect(ckpt, key + NESTED_QUANT_MAP, "F32", (256,), where, "nested code book")
        offset = float(np.float32(state.nested_offset))
        nested = Nested(key + NESTED_ABSMAX, key + NESTED_QUANT_MAP, state.nested_blocksize, offset)
    else:
        for suffix in (NESTED_ABSMAX, NESTED_QUANT_MAP):
            if key + suffix in ckpt.tensors:
                raise FormatError(
                    f"{where} has {key + suffix!r}, but its quant state "
                    f"{state_key!r} has no nested fields"
                )
    return FourBit(
        key,
        key + ABSMAX,
        key + QUANT_MAP,
        state_key,
        state.quant_type,
        state.blocksize,
        shape,
        state.dtype,
        nested,
        ckpt.info(state_key).shape[0],
    )


def _int8(ckpt: Checkpoint, scb_key: str) -> Int8:
    module = scb_key.removesuffix(SCB)
    key = module + ".weight"
    scb = ckpt.info(scb_key)
    where = f"{scb.file}: LLM.int8 weight {key!r} (format {FORMAT!r})"
    weight = ckpt.tensors.get(key)
    if weight is None:
        raise FormatError(f"{where}: {scb_key!r} is there, the int8 weight is missing")
    if weight.dtype != "I8" or len(weight.shape) != 2:
        raise FormatError(
            f"{where} is {weight.dtype} {list(weight.shape)} in {weight.file}; "
            "expected I8 [out, in] next to its SCB"
        )
    _expect(ckpt, scb_key, "F32", (weight.shape[0],), where, "row absmax (SCB)")
    fmt = module + WEIGHT_FORMAT
    format_key = fmt if fmt in ckpt.tensors else None
    format_shape: tuple[int, ...] = ()
    if format_key is not None:
        info = ckpt.info(format_key)
        if info.dtype not in ("U8", "I64", "I32") or info.shape not in ((), (1,)):
            raise FormatError(
                f"{where}: {format_key!r} in {info.file} is {info.dtype} {list(info.shape)}; "
                "expected a U8 scalar"
            )
        format_shape = info.shape
    shape = (weight.shape[0], weight.shape[1])
    return Int8(key, scb_key, format_key, shape, natural_dtype(ckpt), format_shape)


def _expect(
    ckpt: Checkpoint,
    key: str,
    dtype: str,
    shape: tuple[int, ...],
    where: str,
    role: str,
) -> TensorInfo:
    info = ckpt.tensors.get(key)
    if info is None:
        raise FormatError(f"{where} has no {role} tensor {key!r}")
    if info.dtype != dtype or tuple(info.shape) != shape:
        hint = ""
        if role == "packed codes" and info.dtype != "U8":
            hint = " (flexq reads bnb_4bit_quant_storage='uint8' only)"
        raise FormatError(
            f"{where}: its {role} {key!r} in {info.file} is {info.dtype} "
            f"{list(info.shape)}; expected {dtype} {list(shape)}{hint}"
        )
    return info


def _check_unclaimed(ckpt: Checkpoint, cfg: BnbConfig, tensors: dict[str, Any]) -> None:
    """Quantized-looking weights of a bnb config that no quant state claimed."""
    for key, info in ckpt.tensors.items():
        if key in tensors or not key.endswith(".weight"):
            continue
        four = cfg.load_in_4bit and info.dtype == "U8" and len(info.shape) == 2
        four = four and info.shape[1] == 1
        eight = cfg.load_in_8bit and info.dtype == "I8"
        if four or eight:
            missing = key + QUANT_STATE + "<nf4|fp4>" if four else key.removesuffix(".weight") + SCB
            raise FormatError(
                f"{info.file}: tensor {key!r} is {info.dtype} {list(info.shape)} in a "
                f"bitsandbytes checkpoint but has no {missing!r} (format {FORMAT!r})"
            )


def _check_skipped(ckpt: Checkpoint, tensors: dict[str, FourBit | Int8]) -> None:
    where = f"{ckpt.path / 'config.json'}: quantization_config"
    skipped = IgnoreList.from_config(ckpt.quantization_config, where, SKIP_FIELDS)
    for key, t in tensors.items():
        skipped.refuse(
            key,
            file=ckpt.info(t.key).file,
            tensor=key,
            stored="stored quantized",
            format_name=FORMAT,
        )
