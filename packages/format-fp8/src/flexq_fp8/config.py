"""What config.json's ``quantization_config`` says about FP8 weights.

Reads the three producer dialects: ``quant_method: fp8`` (AutoFP8 / vLLM /
DeepSeek / HF finegrained, with ``weight_block_size`` for block scales),
``fbgemm_fp8`` (per-channel) and ``compressed-tensors`` with
``format: float-quantized`` groups (tensor / channel / group / block
strategies). Gives the block sizes a scale grid may have and the modules the
config excludes from quantization.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flexq import Checkpoint, FormatError

if TYPE_CHECKING:
    from flexq_fp8.layout import BlockCandidate

#: Keys under which producers list modules left unquantized.
IGNORE_FIELDS = ("ignored_layers", "modules_to_not_convert", "ignore")


@dataclass(frozen=True)
class Fp8Config:
    """The FP8-relevant part of a checkpoint's config.

    :ivar method: ``quant_method`` (lower case) or "" when there is none.
    :ivar candidates: block sizes over [out, in] the config allows, in order of
        preference; None when the config does not say (infer from the grid).
    :ivar ignored: (config field, entry) pairs naming unquantized modules.
    """

    method: str
    candidates: tuple[BlockCandidate, ...] | None
    ignored: tuple[tuple[str, str], ...]

    def ignored_by(self, key: str) -> tuple[str, str] | None:
        """The (field, entry) of the ignore list that covers tensor ``key``, if any."""
        module = key.removesuffix(".weight")
        for field, entry in self.ignored:
            if _matches(entry, module) or _matches(entry, key):
                return field, entry
        return None


def _matches(entry: str, name: str) -> bool:
    # compressed-tensors writes regexes as "re:<pattern>" and matches them with re.match.
    if entry.startswith("re:"):
        return re.match(entry[3:], name) is not None
    # Plain entries name a module or a dotted run of components ("lm_head",
    # "mlp.gate"); matching on component boundaries keeps "gate" off "gate_proj".
    return f".{entry}." in f".{name}."


def read_config(ckpt: Checkpoint) -> Fp8Config:
    """Interpret ``ckpt.quantization_config``.

    :raises FormatError: on a malformed ``weight_block_size`` or block structure.
    """
    qc = ckpt.quantization_config
    where = f"{ckpt.path / 'config.json'}: quantization_config"
    method = str(qc.get("quant_method", "")).lower()
    ignored = tuple(
        (field, str(entry))
        for field in IGNORE_FIELDS
        for entry in _string_list(qc.get(field), f"{where}.{field}")
    )
    candidates: tuple[BlockCandidate, ...] | None = None
    if method == "fp8" and qc.get("weight_block_size") is not None:
        candidates = (_pair(qc["weight_block_size"], f"{where}.weight_block_size"),)
    elif method == "fbgemm_fp8":
        candidates = ((1, None),)
    elif method == "compressed-tensors":
        candidates = _compressed_tensors(qc, where)
    return Fp8Config(method, candidates, ignored)


def _compressed_tensors(qc: Mapping[str, Any], where: str) -> tuple[BlockCandidate, ...] | None:
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, Mapping):
        raise FormatError(f"{where}.config_groups is not an object (format fp8)")
    found: list[BlockCandidate] = []
    for name, group in groups.items():
        if not isinstance(group, Mapping):
            continue
        weights = group.get("weights") or {}
        fmt = group.get("format") or qc.get("format")
        if fmt != "float-quantized" or weights.get("type") != "float":
            continue
        if weights.get("num_bits") != 8:
            continue
        found.append(_strategy(weights, f"{where}.config_groups.{name}.weights"))
    return tuple(found) if found else None


def _strategy(weights: Mapping[str, Any], where: str) -> BlockCandidate:
    strategy = weights.get("strategy")
    if strategy == "tensor":
        return None, None
    if strategy == "channel":
        return 1, None
    if strategy == "group":
        g = weights.get("group_size")
        if not isinstance(g, int) or isinstance(g, bool) or g <= 0:
            raise FormatError(f"{where}.group_size must be a positive integer, got {g!r}")
        return 1, g
    if strategy == "block":
        return _pair(weights.get("block_structure"), f"{where}.block_structure")
    raise FormatError(f"{where}.strategy {strategy!r} is not one FP8 weights use (format fp8)")


def _pair(value: object, where: str) -> tuple[int, int]:
    if (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return int(value[0]), int(value[1])
    raise FormatError(f"{where} must be two positive integers, got {value!r} (format fp8)")


def _string_list(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise FormatError(f"{where} must be a list of module names, got {value!r} (format fp8)")
