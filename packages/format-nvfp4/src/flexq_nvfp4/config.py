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

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexq import Checkpoint, FormatError
from flexq.formatkit import (
    IgnoreList,
    QuantConfig,
    parse_quant_config,
    read_compressed_tensors,
    read_config_file,
    validate_config,
)
from flexq_nvfp4.identity import CT_FORMAT as CT_FORMAT
from flexq_nvfp4.identity import FORMAT as FORMAT

HF_QUANT_CONFIG = "hf_quant_config.json"
#: ModelOpt algorithms whose weights are plain NVFP4 (the activation side differs).
MODELOPT_ALGOS = frozenset({"NVFP4", "W4A16_NVFP4"})
MIXED = "MIXED_PRECISION"
GROUP_SIZE = 16

if TYPE_CHECKING:
    from flexq.formatkit import CtConfig


class ModeloptLayer(QuantConfig):
    """One module of a ModelOpt ``MIXED_PRECISION`` ``quantized_layers``."""

    quant_algo: str
    group_size: int | None = None


class ModeloptSettings(QuantConfig):
    """ModelOpt's settings: config.json's ``quantization_config`` (``ignore``) or
    ``hf_quant_config.json``'s ``quantization`` (``exclude_modules``)."""

    quant_algo: str
    group_size: int | None = None
    exclude_modules: list[str] | None = None
    ignore: list[str] | None = None
    quantized_layers: dict[str, ModeloptLayer] | None = None


class AutoRoundConfig(QuantConfig):
    """auto-round's own ``quantization_config`` (the fields this format reads)."""

    data_type: str | None = None
    group_size: int | None = None


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
        ct = read_compressed_tensors(ckpt, FORMAT)
        assert ct is not None  # the method says so
        return _compressed_tensors(ct)
    if method == "auto-round":
        ar = parse_quant_config(AutoRoundConfig, ckpt, FORMAT)
        if (ar.data_type or "").startswith("nv_fp"):
            _check_group_size(ar.group_size, where)
        return Nvfp4Config(where, auto_round=True)
    if method.startswith("modelopt"):
        if isinstance(qc.get("quantization"), Mapping):
            return _modelopt(qc["quantization"], f"{where}.quantization")
        return _modelopt(qc, where)
    if not method:
        path = ckpt.path / HF_QUANT_CONFIG
        doc = _hf_quant_config(ckpt, path)
        if doc is not None:
            return _modelopt(doc.get("quantization"), f"{path}: quantization")
    return Nvfp4Config(where)


def _compressed_tensors(ct: CtConfig) -> Nvfp4Config:
    for name, group in ct.groups_of(CT_FORMAT):
        if group.weights is not None:
            _check_group_size(group.weights.group_size, f"{ct.where}.config_groups.{name}.weights")
    return Nvfp4Config(ct.where, ct_formats=ct.declared_formats, ignored=ct.ignored)


def _modelopt(settings: object, where: str) -> Nvfp4Config:
    """ModelOpt's ``settings`` (the mapping at ``where``) validated by the kit's one
    config check, so a bad field is named as every format names it."""
    if not isinstance(settings, Mapping):
        raise FormatError(
            f"{where}: missing or not an object (got {settings!r}; format {FORMAT!r}); "
            f"ModelOpt writes its settings there as an object with quant_algo"
        )
    body = validate_config(ModeloptSettings, settings, where, f"format {FORMAT!r}")
    algo = body.quant_algo.upper()
    if algo in MODELOPT_ALGOS:
        _check_group_size(body.group_size, where)
    layers: dict[str, str] = {}
    if algo == MIXED:
        for module, spec in (body.quantized_layers or {}).items():
            layers[module] = spec.quant_algo.upper()
            if layers[module] in MODELOPT_ALGOS:
                _check_group_size(spec.group_size, f"{where}.quantized_layers.{module}")
    entries = [("exclude_modules", e) for e in body.exclude_modules or ()]
    entries += [("ignore", e) for e in body.ignore or ()]
    return Nvfp4Config(where, modelopt_algo=algo, layers=layers, ignored=IgnoreList(tuple(entries)))


def _check_group_size(value: int | None, where: str) -> None:
    if value is not None and value != GROUP_SIZE:
        raise FormatError(
            f"{where}.group_size is {value!r}; NVFP4 blocks are {GROUP_SIZE} elements "
            f"(format {FORMAT!r})"
        )


def _hf_quant_config(ckpt: Checkpoint, path: Path) -> dict[str, Any] | None:
    """ModelOpt's ``hf_quant_config.json`` when it is there."""
    if not path.is_file():
        return None
    if not path.resolve().is_relative_to(ckpt.path.resolve()):
        raise FormatError(f"{path}: points outside the checkpoint (format {FORMAT!r})")
    return read_config_file(path, f"{path} (format {FORMAT!r})")
