"""What config.json's ``quantization_config`` says about GPTQ weights, and per layer.

Two producer dialects share the packing:

- ``quant_method: "gptq"`` (AutoGPTQ, GPTQModel, optimum, auto-round's
  ``auto_gptq`` export, Qwen's -GPTQ-Int4/Int8): ``bits``, ``group_size``,
  ``sym``, ``desc_act``, ``checkpoint_format`` (newer GPTQModel: ``format``;
  absent or ``"gptq"``: v1 zeros, stored as z - 1; ``"gptq_v2"``: z stored),
  GPTQModel's ``pack_dtype`` and
  ``dynamic`` (per-module overrides keyed ``"+:regex"`` / bare regex, and
  ``"-:regex"`` for modules left unquantized, matched with ``re.match``),
  optimum's ``modules_in_block_to_quantize`` and ``block_name_to_quantize``,
  ``lm_head``, and the ignore lists :class:`flexq.formatkit.IgnoreList` reads
  (``modules_to_not_convert`` and its kin).
- ``quant_method: "auto-round"`` (or the older ``"intel/auto-round"``): the same
  scheme keys plus ``data_type`` (``"int"``), ``act_bits``, ``packing_format``
  (``"auto_round:auto_gptq"`` / ``"auto_round:gptq"``: v1 zeros;
  ``"auto_round"`` / ``"auto_round:gptqmodel"``: z stored; absent: transformers'
  ``AutoRoundConfig`` default ``"auto_round:gptq"``), ``block_name_to_quantize``
  (a comma-separated string or a list) and ``extra_config`` (layer name or
  regex -> scheme overrides; ``bits >= 16`` means unquantized; regexes matched
  with ``re.search`` as auto-round's loader does).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError, field_validator

from flexq import Checkpoint, FormatError
from flexq.formatkit import IgnoreList, QuantConfig, parse_quant_config, read_config_file
from flexq_gptq.identity import (
    AUTO_ROUND_METHODS as AUTO_ROUND_METHODS,
)
from flexq_gptq.identity import (
    FORMAT_NAME as FORMAT_NAME,
)
from flexq_gptq.identity import (
    GPTQ_METHODS as GPTQ_METHODS,
)
from flexq_gptq.packing import BITS

#: auto-round packing formats in the GPTQ layout, and whether they store z - 1.
AUTO_ROUND_PACKINGS = {
    "auto_round:auto_gptq": True,
    "auto_round:gptq": True,
    "auto_round": False,
    "auto_round:gptqmodel": False,
}
#: auto-round ``data_type`` values of integer (GPTQ-packed) weights.
INTEGER_DATA_TYPES = ("int", "int_sym", "int_asym")
#: GPTQ checkpoint formats in the GPTQ layout, and whether they store z - 1.
GPTQ_CHECKPOINT_FORMATS = {"gptq": True, "gptq_v2": False}


class GptqQuantConfig(QuantConfig):
    """The keys of ``quantization_config`` this format reads (others are kept, unread)."""

    quant_method: str
    bits: int = 4
    group_size: int = 128
    sym: bool = True
    desc_act: bool = False
    checkpoint_format: str | None = None
    format: str | None = None
    pack_dtype: str | None = None
    packing_format: str | None = None
    data_type: str | None = None
    act_bits: int | None = None
    lm_head: bool = False
    dynamic: dict[str, dict[str, Any]] | None = None
    extra_config: dict[str, dict[str, Any]] | None = None
    block_name_to_quantize: str | list[str | list[str]] | None = None
    modules_in_block_to_quantize: list[str | list[str]] | None = None

    @field_validator("bits")
    @classmethod
    def _bits(cls, v: int) -> int:
        if v not in BITS:
            raise ValueError(f"must be one of {', '.join(map(str, BITS))}, got {v}")
        return v

    @field_validator("group_size")
    @classmethod
    def _group_size(cls, v: int) -> int:
        if v != -1 and v <= 0:
            raise ValueError(f"must be -1 or positive, got {v}")
        return v


@dataclass(frozen=True)
class Scheme:
    """How one module is quantized: bits, group size (-1 = all of in), symmetry, act-order."""

    bits: int
    group_size: int
    sym: bool
    desc_act: bool


@dataclass(frozen=True)
class GptqConfig:
    """The parsed config: the default scheme, the zero convention and the per-module rules."""

    method: str
    default: Scheme
    #: True when stored zeros are z - 1 (GPTQ v1).
    zeros_minus_one: bool
    raw: GptqQuantConfig
    ignored: IgnoreList
    where: str

    def scheme_of(self, module: str) -> Scheme | str:
        """The scheme of ``module``, or a sentence saying why it is left unquantized."""
        raw = self.raw
        hit = self.ignored.match(module)
        if hit is not None:
            return f"{hit[0]} lists {hit[1]!r}"
        if module.split(".")[-1] == "lm_head" and not raw.lm_head and not self._named(module):
            return "lm_head is false"
        blocks = _names(raw.block_name_to_quantize)
        covered = any(module.startswith(f"{b}.") for b in blocks)
        if blocks and not covered and not self._named(module):
            return f"block_name_to_quantize {blocks} does not cover it"
        inside = _names(raw.modules_in_block_to_quantize)
        if inside and not any(re.search(n, module) for n in inside) and not self._named(module):
            return f"modules_in_block_to_quantize {inside} does not list it"
        overrides: dict[str, Any] = {}
        for key, cfg in (raw.dynamic or {}).items():
            pattern = key[2:] if key.startswith(("+:", "-:")) else key
            if re.match(pattern, module):
                if key.startswith("-:"):
                    return f"dynamic rule {key!r} excludes it"
                overrides = dict(cfg)  # the first matching rule wins, as in GPTQModel
                break
        extra = raw.extra_config or {}
        if module in extra:
            overrides = {**overrides, **extra[module]}
        else:
            for key, cfg in extra.items():
                if re.search(key, module):
                    overrides = {**overrides, **cfg}
                    break
        bits = overrides.get("bits", self.default.bits)
        if isinstance(bits, int) and bits >= 16:
            return "its extra_config gives bits >= 16 (unquantized)"
        where = f"{self.where} (override for {module!r})"
        data_type = overrides.get("data_type", "int")
        if not isinstance(data_type, str) or data_type.lower() not in INTEGER_DATA_TYPES:
            raise FormatError(f"{where}: data_type {data_type!r} is not an integer GPTQ layout")
        act_bits = overrides.get("act_bits", 16)
        if not isinstance(act_bits, int) or act_bits < 16:
            raise FormatError(
                f"{where}: act_bits {act_bits!r}: quantized activations use another layout"
            )
        scheme = Scheme(
            bits,
            overrides.get("group_size", self.default.group_size),
            overrides.get("sym", self.default.sym),
            overrides.get("desc_act", self.default.desc_act),
        )
        return self._checked(scheme, where)

    def _named(self, module: str) -> bool:
        """Whether ``extra_config`` names ``module`` exactly (auto-round's out-of-block layers)."""
        return module in (self.raw.extra_config or {})

    def _checked(self, scheme: Scheme, where: str) -> Scheme:
        if scheme.bits not in BITS or isinstance(scheme.bits, bool):
            raise FormatError(f"{where}: bits must be one of {BITS}, got {scheme.bits!r}")
        g = scheme.group_size
        if not isinstance(g, int) or isinstance(g, bool) or (g != -1 and g <= 0):
            raise FormatError(f"{where}: group_size must be -1 or positive, got {g!r}")
        for name in ("sym", "desc_act"):
            if not isinstance(getattr(scheme, name), bool):
                raise FormatError(
                    f"{where}: {name} must be true or false, got {getattr(scheme, name)!r}"
                )
        return scheme


def _names(value: str | Sequence[str | Sequence[str]] | None) -> list[str]:
    """A flat list of names from a string (comma-separated) or a possibly nested list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    out: list[str] = []
    for item in value:
        out.extend(_names(item) if isinstance(item, str) else [n for x in item for n in _names(x)])
    return out


#: AutoGPTQ's own config file, beside config.json (the only one in checkpoints made
#: before transformers read GPTQ, which have no quantization_config).
QUANTIZE_CONFIG_NAME = "quantize_config.json"


def quant_config_of(ckpt: Checkpoint) -> tuple[dict[str, Any], str]:
    """(quantization config, where it was read) for ``ckpt``.

    config.json's ``quantization_config`` when there is one; else AutoGPTQ's
    ``quantize_config.json`` (which early AutoGPTQ wrote without ``quant_method``)
    when packed weights sit beside it.
    """
    if ckpt.quantization_config:
        return ckpt.quantization_config, f"{ckpt.path / 'config.json'}: quantization_config"
    path = ckpt.path / QUANTIZE_CONFIG_NAME
    # Only beside packed weights: a dequantized copy (``flexq convert`` output) may
    # still carry the file, and its plain weights are no GPTQ checkpoint.
    if path.is_file() and any(k.endswith(".qweight") for k in ckpt.tensors):
        where = f"{path}: quantize_config"
        value = read_config_file(path, f"{where} (format {FORMAT_NAME!r})")
        if "bits" in value:
            return {"quant_method": "gptq", **value}, where
    return {}, ""


def method_of(ckpt: Checkpoint) -> str | None:
    """``quant_method`` (lower case) when it is one this format decodes, else None."""
    method = quant_config_of(ckpt)[0].get("quant_method")
    if isinstance(method, str) and method.lower() in (*GPTQ_METHODS, *AUTO_ROUND_METHODS):
        return method.lower()
    return None


def parse_config(ckpt: Checkpoint) -> GptqConfig | None:
    """The GPTQ config of ``ckpt``, or None when its ``quant_method`` is not GPTQ's.

    :raises FormatError: naming config.json and the field on a bad or
        unsupported value.
    """
    method = method_of(ckpt)
    if method is None:
        return None
    qc, where = quant_config_of(ckpt)
    data_type = qc.get("data_type")
    floats = isinstance(data_type, str) and data_type.lower() not in INTEGER_DATA_TYPES
    if method not in GPTQ_METHODS and floats:
        return None  # auto-round's float exports (FP8, NVFP4) belong to other formats
    if qc is ckpt.quantization_config:
        raw = parse_quant_config(GptqQuantConfig, ckpt, FORMAT_NAME)
    else:
        try:
            raw = GptqQuantConfig.model_validate(qc)
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise FormatError(
                f"{where}.{field}: {first['msg']} (got {first.get('input')!r}; "
                f"format {FORMAT_NAME!r})"
            ) from None

    def fail(field: str, msg: str) -> FormatError:
        return FormatError(f"{where}.{field}: {msg} (format {FORMAT_NAME!r})")

    if raw.pack_dtype is not None and raw.pack_dtype.removeprefix("torch.") != "int32":
        raise fail("pack_dtype", f"{raw.pack_dtype!r} words are not supported (int32 only)")
    if method in GPTQ_METHODS:
        # Newer GPTQModel writes `format` beside (and instead of) `checkpoint_format`.
        field = "checkpoint_format" if raw.checkpoint_format is not None else "format"
        given = raw.checkpoint_format if raw.checkpoint_format is not None else raw.format
        fmt = (given or "gptq").lower()
        if fmt not in GPTQ_CHECKPOINT_FORMATS:
            raise fail(
                field,
                f"{given!r} is not a GPTQ layout this format reads "
                f"(supported: {', '.join(GPTQ_CHECKPOINT_FORMATS)})",
            )
        minus_one = GPTQ_CHECKPOINT_FORMATS[fmt]
    else:
        if raw.act_bits is not None and raw.act_bits < 16:
            raise fail("act_bits", f"{raw.act_bits}-bit activations use another layout")
        packing = (raw.packing_format or "auto_round:gptq").lower()
        if packing not in AUTO_ROUND_PACKINGS:
            raise fail(
                "packing_format",
                f"{raw.packing_format!r} is not a GPTQ layout this format reads "
                f"(supported: {', '.join(AUTO_ROUND_PACKINGS)})",
            )
        minus_one = AUTO_ROUND_PACKINGS[packing]
    patterns = [("dynamic", k, k.removeprefix("+:").removeprefix("-:")) for k in raw.dynamic or {}]
    patterns += [("extra_config", k, k) for k in raw.extra_config or {}]
    patterns += [
        ("modules_in_block_to_quantize", n, n) for n in _names(raw.modules_in_block_to_quantize)
    ]
    for field, key, pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as err:
            raise fail(field, f"key {key!r} is not a regular expression ({err})") from None
    scheme = Scheme(raw.bits, raw.group_size, raw.sym, raw.desc_act)
    return GptqConfig(method, scheme, minus_one, raw, IgnoreList.from_config(qc, where), where)
