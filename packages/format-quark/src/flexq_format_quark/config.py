"""What config.json's ``quantization_config`` says about an AMD Quark export.

Read by :mod:`flexq_format_quark.detect`. Quark (``quark.torch.export``) writes
``quant_method: "quark"``, a ``global_quant_config``, per-name
``layer_quant_config`` and per-module-type ``layer_type_quant_config`` overrides,
an ``exclude`` list and ``export.pack_method``. Each layer config's ``weight`` is
one tensor spec (``dtype``, ``qscheme``, ``ch_axis``, ``group_size``,
``scale_format`` ...). :func:`read_config` validates the keys and
:meth:`QuarkConfig.weight_spec` picks a module's spec with Quark's own priority
(``quark/torch/quantization/model_transformation.py``): ``exclude`` first, then
``layer_quant_config`` (exact name, then the first fnmatch pattern), then
``layer_type_quant_config``, then ``global_quant_config``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flexq import Checkpoint, FormatError
from flexq.formatkit import QuantConfig, parse_quant_config
from flexq_format_quark.identity import FORMAT_NAME as FORMAT_NAME

#: Module types whose ``layer_type_quant_config`` entry applies to a 2-D ``X.weight``:
#: Quark quantizes ``nn.Linear`` through it; a checkpoint does not record module types,
#: so any other type named there is refused rather than guessed.
LINEAR_TYPES = frozenset({"Linear"})


class TensorSpec(BaseModel):
    """One Quark tensor spec (``QTensorConfig.to_dict``), the keys this format reads."""

    model_config = ConfigDict(extra="allow", frozen=True)

    dtype: str
    qscheme: str | None = None
    ch_axis: int | None = None
    group_size: int | None = None
    symmetric: bool | None = None
    is_dynamic: bool | None = None
    scale_format: str | None = None
    mx_element_dtype: str | None = None
    is_scale_quant: bool | None = None

    def describe(self) -> str:
        """``dtype/qscheme[/group N][/scale_format]`` for messages."""
        parts = [self.dtype, str(self.qscheme)]
        if self.group_size not in (None, 0, -1):
            parts.append(f"group {self.group_size}")
        if self.scale_format:
            parts.append(f"scale {self.scale_format}")
        return "/".join(parts)


class LayerConfig(BaseModel):
    """One layer config: the weight spec (a list for two-stage schemes) and the rest."""

    model_config = ConfigDict(extra="allow", frozen=True)

    weight: TensorSpec | list[TensorSpec] | None = None


class Export(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    pack_method: str = "reorder"
    weight_format: str = "real_quantized"


class QuarkQuantConfig(QuantConfig):
    """The ``quantization_config`` keys of a Quark export."""

    quant_method: str
    global_quant_config: LayerConfig
    layer_quant_config: dict[str, LayerConfig] = Field(default_factory=dict)
    layer_type_quant_config: dict[str, LayerConfig] = Field(default_factory=dict)
    exclude: list[str] = Field(default_factory=list)
    export: Export = Field(default_factory=Export)


@dataclass(frozen=True)
class QuarkConfig:
    """A validated Quark ``quantization_config``.

    :ivar reorder: ``export.pack_method == "reorder"``: 4-bit words interleave their
        codes in AutoAWQ's GEMM order; ``"order"`` keeps them sequential.
    """

    model: QuarkQuantConfig
    where: str

    @property
    def reorder(self) -> bool:
        return self.model.export.pack_method == "reorder"

    def excluded(self, module: str) -> str | None:
        """The ``exclude`` entry that covers ``module`` (exact name or fnmatch), or None."""
        for entry in self.model.exclude:
            if entry == module or fnmatch.fnmatchcase(module, entry):
                return entry
        return None

    def weight_spec(self, module: str) -> tuple[TensorSpec | list[TensorSpec] | None, str]:
        """The weight spec Quark gave linear ``module`` and where it came from
        (``"exclude['lm_head']"``, ``"layer_quant_config['*v_proj']"``,
        ``"global_quant_config"``), for messages."""
        entry = self.excluded(module)
        if entry is not None:
            return None, f"exclude[{entry!r}]"
        layers = self.model.layer_quant_config
        if module in layers:
            return layers[module].weight, f"layer_quant_config[{module!r}]"
        for pattern, layer in layers.items():
            if fnmatch.fnmatchcase(module, pattern):
                return layer.weight, f"layer_quant_config[{pattern!r}]"
        for kind, layer in self.model.layer_type_quant_config.items():
            if kind in LINEAR_TYPES:
                return layer.weight, f"layer_type_quant_config[{kind!r}]"
        return self.model.global_quant_config.weight, "global_quant_config"


def read_config(ckpt: Checkpoint) -> QuarkConfig | None:
    """The Quark keys of ``quantization_config``, checked; None if not a Quark export.

    :raises FormatError: on a malformed key, a packing or weight format this format
        does not decode, or a module-type override it cannot place.
    """
    qc: Mapping[str, Any] = ckpt.quantization_config
    method = qc.get("quant_method")
    if not isinstance(method, str) or method.lower() != FORMAT_NAME:
        return None
    where = f"{ckpt.path / 'config.json'}: quantization_config"
    model = parse_quant_config(QuarkQuantConfig, ckpt, FORMAT_NAME)

    def fail(msg: str) -> FormatError:
        return FormatError(f"{where}: {msg} (format {FORMAT_NAME!r})")

    if model.export.pack_method not in ("reorder", "order"):
        raise fail(
            f"export.pack_method {model.export.pack_method!r} is not supported "
            "(supported: 'reorder', 'order')"
        )
    if model.export.weight_format != "real_quantized":
        raise fail(
            f"export.weight_format {model.export.weight_format!r}: only 'real_quantized' "
            "exports store quantized weights; a 'fake_quantized' export holds plain floats "
            "beside scales, load it with --allow-unclaimed or re-export real_quantized"
        )
    others = sorted(set(model.layer_type_quant_config) - LINEAR_TYPES)
    if others:
        raise fail(
            f"layer_type_quant_config names module types {others}: a checkpoint does not "
            "record module types, so flexq cannot tell which weights they cover "
            "(supported: 'Linear'); re-export with layer_quant_config name patterns"
        )
    return QuarkConfig(model, where)
