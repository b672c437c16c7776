"""What a checkpoint's config says about NVFP4 weights, in both producers' dialects.

- compressed-tensors (``config.json`` ``quantization_config``, ``quant_method:
  "compressed-tensors"``): the declared formats (``format`` and each config
  group's ``format``), the NVFP4 groups' ``weights.group_size`` (16), and
  ``ignore`` (module names, or ``re:<regex>`` matched from the start).
- NVIDIA ModelOpt: ``config.json`` ``quantization_config`` with ``quant_method:
  "modelopt"``, ``quant_algo`` and ``ignore`` (what newer ModelOpt exports write), or
  only ``hf_quant_config.json`` ``{"quantization": {"quant_algo", "group_size",
  "exclude_modules"}}`` (older exports; newer ones write both). ``exclude_modules``
  / ``ignore`` entries are fnmatch wildcards. ``MIXED_PRECISION`` names each
  quantized module's algorithm in ``quantized_layers``.
- auto-round's own format (``quant_method: "auto-round"``, ``data_type: "nv_fp"``,
  ``packing_format: "auto_round:llm_compressor"``): compressed-tensors' tensor names,
  auto-round's dequantization order; ``group_size`` 16.

Used by :mod:`flexq_nvfp4.detect`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flexq import Checkpoint, FormatError
from flexq.formatkit import IgnoreList

FORMAT = "nvfp4"
CT_FORMAT = "nvfp4-pack-quantized"
HF_QUANT_CONFIG = "hf_quant_config.json"
#: ModelOpt algorithms whose weights are plain NVFP4 (the activation side differs).
MODELOPT_ALGOS = frozenset({"NVFP4", "W4A16_NVFP4"})
MIXED = "MIXED_PRECISION"
GROUP_SIZE = 16


@dataclass(frozen=True)
class Nvfp4Config:
    """The NVFP4-relevant part of a checkpoint's config.

    :ivar where: the file and field the settings come from, for messages.
    :ivar ct_formats: formats a compressed-tensors config declares (empty otherwise).
    :ivar modelopt_algo: ModelOpt's ``quant_algo`` (upper case), None without a ModelOpt config.
    :ivar layers: for ModelOpt ``MIXED_PRECISION``, module -> its ``quant_algo``.
    :ivar ignored: the modules the config lists as unquantized (the kit's one rule).
    :ivar auto_round: the checkpoint is auto-round's own format (its dequantization order).
    """

    where: str
    ct_formats: frozenset[str] = frozenset()
    modelopt_algo: str | None = None
    layers: Mapping[str, str] = field(default_factory=dict)
    ignored: IgnoreList = field(default_factory=IgnoreList)
    auto_round: bool = False

    @property
    def declares_ct_nvfp4(self) -> bool:
        return CT_FORMAT in self.ct_formats

    def modelopt_algo_of(self, module: str) -> str | None:
        """The ModelOpt algorithm that quantized ``module`` (None: the config does not say)."""
        if self.modelopt_algo == MIXED:
            return self.layers.get(module)
        return self.modelopt_algo


def read_config(ckpt: Checkpoint) -> Nvfp4Config:
    """Interpret the checkpoint's quantization settings.

    :raises FormatError: on a malformed field this format relies on, naming file and field.
    """
    qc = ckpt.quantization_config
    where = f"{ckpt.path / 'config.json'}: quantization_config"
    method = str(qc.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        return _compressed_tensors(qc, where)
    if method == "auto-round":
        if str(qc.get("data_type", "")).startswith("nv_fp"):
            _check_group_size(qc.get("group_size"), where)
        return Nvfp4Config(where, auto_round=True)
    if method.startswith("modelopt"):
        return _modelopt(qc, where, nested=isinstance(qc.get("quantization"), Mapping))
    if not method:
        doc = _hf_quant_config(ckpt)
        if doc is not None:
            return _modelopt(doc, f"{ckpt.path / HF_QUANT_CONFIG}", nested=True)
    return Nvfp4Config(where)


def _compressed_tensors(qc: Mapping[str, Any], where: str) -> Nvfp4Config:
    formats = {qc["format"]} if isinstance(qc.get("format"), str) else set()
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, Mapping):
        raise FormatError(f"{where}.config_groups is not an object (format {FORMAT!r})")
    for name, group in groups.items():
        if not isinstance(group, Mapping):
            continue
        fmt = group.get("format") if isinstance(group.get("format"), str) else qc.get("format")
        if isinstance(fmt, str):
            formats.add(fmt)
        if fmt == CT_FORMAT:
            weights = group.get("weights") or {}
            _check_group_size(weights.get("group_size"), f"{where}.config_groups.{name}.weights")
    # "mixed-precision" only says the groups carry the formats.
    formats.discard("mixed-precision")
    ignored = _ignore(qc, ("ignore",), where)
    return Nvfp4Config(where, ct_formats=frozenset(formats), ignored=ignored)


def _modelopt(doc: Mapping[str, Any], where: str, *, nested: bool) -> Nvfp4Config:
    body: Mapping[str, Any] = doc["quantization"] if nested else doc
    prefix = f"{where}.quantization" if nested else where
    if not isinstance(body, Mapping):
        raise FormatError(f"{prefix} is not an object (format {FORMAT!r})")
    algo = body.get("quant_algo")
    if not isinstance(algo, str) or not algo:
        raise FormatError(f"{prefix}.quant_algo must be a string, got {algo!r} (format {FORMAT!r})")
    algo = algo.upper()
    if algo in MODELOPT_ALGOS:
        _check_group_size(body.get("group_size"), prefix)
    layers: dict[str, str] = {}
    if algo == MIXED:
        raw = body.get("quantized_layers") or {}
        if not isinstance(raw, Mapping):
            raise FormatError(f"{prefix}.quantized_layers is not an object (format {FORMAT!r})")
        for module, spec in raw.items():
            layer_algo = spec.get("quant_algo") if isinstance(spec, Mapping) else None
            if not isinstance(layer_algo, str):
                raise FormatError(
                    f"{prefix}.quantized_layers.{module}.quant_algo must be a string, "
                    f"got {layer_algo!r} (format {FORMAT!r})"
                )
            layers[str(module)] = layer_algo.upper()
            if layer_algo.upper() in MODELOPT_ALGOS:
                _check_group_size(spec.get("group_size"), f"{prefix}.quantized_layers.{module}")
    ignored = _ignore(body, ("exclude_modules", "ignore"), prefix)
    return Nvfp4Config(where, modelopt_algo=algo, layers=layers, ignored=ignored)


def _check_group_size(value: object, where: str) -> None:
    if value is not None and value != GROUP_SIZE:
        raise FormatError(
            f"{where}.group_size is {value!r}; NVFP4 blocks are {GROUP_SIZE} elements "
            f"(format {FORMAT!r})"
        )


def _ignore(body: Mapping[str, Any], fields: tuple[str, ...], where: str) -> IgnoreList:
    try:
        return IgnoreList.from_config(body, where, fields)
    except FormatError as exc:
        raise FormatError(f"{exc} (format {FORMAT!r})") from None


def _hf_quant_config(ckpt: Checkpoint) -> dict[str, Any] | None:
    """ModelOpt's ``hf_quant_config.json`` when it is there and describes a quantization."""
    path = ckpt.path / HF_QUANT_CONFIG
    if not path.is_file():
        return None
    if not path.resolve().is_relative_to(ckpt.path.resolve()):
        raise FormatError(f"{path}: points outside the checkpoint (format {FORMAT!r})")
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{path}: not valid JSON ({exc}) (format {FORMAT!r})") from None
    if not isinstance(doc, dict) or "quantization" not in doc:
        raise FormatError(
            f"{path}: expected an object with a 'quantization' object (format {FORMAT!r})"
        )
    return doc
