"""The integer part of a compressed-tensors ``quantization_config``, as a pydantic model.

For :mod:`flexq_ct_int.detect`. llm-compressor writes (compressed-tensors 0.19.0)::

    {"quant_method": "compressed-tensors", "format": "pack-quantized",
     "config_groups": {"group_0": {"format": "pack-quantized", "targets": ["Linear"],
        "weights": {"num_bits": 4, "type": "int", "symmetric": true,
                    "strategy": "group", "group_size": 128, "actorder": null, ...},
        "input_activations": null}},
     "ignore": ["lm_head"], ...}

``format`` sits at the top, in each group, or both; a top-level
``"mixed-precision"`` means every group names its own. A module's scheme is the
group whose targets match it best, as compressed-tensors' ``match_targets``
ranks them: the exact module name, then a ``re:`` pattern (``re.match``), then a
class name (``"Linear"``), which headers cannot check and so match every
quantized module. ``ignore`` follows the kit's one rule (:class:`IgnoreList`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator

from flexq import Checkpoint, FormatError
from flexq.formatkit import IgnoreList, QuantConfig, parse_quant_config
from flexq_ct_int.identity import (
    FORMAT_NAME as FORMAT_NAME,
)
from flexq_ct_int.identity import (
    FORMATS as FORMATS,
)
from flexq_ct_int.identity import (
    INT as INT,
)
from flexq_ct_int.identity import (
    PACK as PACK,
)
from flexq_ct_int.identity import (
    QUANT_METHOD as QUANT_METHOD,
)

MIXED = "mixed-precision"

Strategy = Literal["tensor", "channel", "group", "block"]


class WeightArgs(QuantConfig):
    """``config_groups.*.weights``: how a group's weights are quantized."""

    num_bits: int = 8
    type: str = "int"
    symmetric: bool = True
    strategy: str | None = None
    group_size: int | None = None
    block_structure: list[int] | None = None
    actorder: str | bool | None = None

    @field_validator("strategy", "type", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    def resolved_strategy(self) -> str:
        """The strategy, inferred from ``group_size`` when absent (as compressed-tensors does)."""
        if self.strategy is not None:
            return self.strategy
        if self.group_size is None:
            return "tensor"
        return "channel" if self.group_size == -1 else "group"

    @property
    def act_order(self) -> bool:
        """Group act-order (older configs: ``"group"``, ``"dynamic"`` or true)."""
        value = self.actorder
        return value is True or (isinstance(value, str) and value.lower() in ("group", "dynamic"))


class ConfigGroup(QuantConfig):
    """One ``config_groups`` entry."""

    targets: list[str] = Field(default_factory=list)
    weights: WeightArgs | None = None
    format: str | None = None


class CompressedTensorsConfig(QuantConfig):
    """The fields of a compressed-tensors ``quantization_config`` this format reads."""

    quant_method: str
    format: str | None = None
    version: str | None = None
    config_groups: dict[str, ConfigGroup] = Field(default_factory=dict)
    ignore: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Scheme:
    """What the config says about one module's weight.

    :ivar group: the ``config_groups`` entry name (for messages).
    :ivar format: the compressed-tensors format of the module (``pack-quantized`` ...).
    """

    group: str
    format: str | None
    weights: WeightArgs | None


@dataclass(frozen=True)
class CtConfig:
    """A parsed compressed-tensors config, with the lookups detection needs."""

    parsed: CompressedTensorsConfig
    ignored: IgnoreList

    def ignored_by(self, module: str) -> str | None:
        """The ``ignore`` entry that covers ``module``, if any."""
        hit = self.ignored.match(module)
        return None if hit is None else hit[1]

    def scheme_for(self, module: str) -> Scheme | None:
        """The scheme of the best-matching group for ``module`` (None: no group targets it)."""
        best: tuple[int, str, str] | None = None
        for name, group in self.parsed.config_groups.items():
            for target in group.targets:
                rank = _target_rank(module, target)
                # A later group's identical target replaces an earlier one (as
                # compressed-tensors' target -> scheme map does); ties otherwise
                # go to the target that sorts first.
                if rank is not None and (best is None or (rank, target) <= best[:2]):
                    best = (rank, target, name)
        if best is None:
            return None
        group = self.parsed.config_groups[best[2]]
        fmt = group.format or self.parsed.format
        return Scheme(best[2], None if fmt == MIXED else fmt, group.weights)

    @property
    def declared_formats(self) -> set[str]:
        """Every format the config names (top level and groups), ``mixed-precision`` aside."""
        found = {self.parsed.format} | {g.format for g in self.parsed.config_groups.values()}
        return {f for f in found if f and f != MIXED}


def _target_rank(module: str, target: str) -> int | None:
    """0 exact name, 1 regex, 2 class name (assumed to match), None no match."""
    if target.startswith("re:"):
        return 1 if re.match(target[3:], module) else None
    if target == module:
        return 0
    # Module paths have dots; a dotless target that is not this module's name is
    # a class name ("Linear"), which every quantized module is taken to be.
    return 2 if "." not in target else None


def read_config(ckpt: Checkpoint) -> CtConfig | None:
    """The compressed-tensors config of ``ckpt``; None when its quant_method is another.

    :raises FormatError: when a compressed-tensors config is malformed (naming the field).
    """
    qc: dict[str, Any] = ckpt.quantization_config
    if str(qc.get("quant_method", "")).lower() != QUANT_METHOD:
        return None
    where = f"{ckpt.path / 'config.json'}: quantization_config"
    parsed = parse_quant_config(CompressedTensorsConfig, ckpt, FORMAT_NAME)
    for entry in [*parsed.ignore, *(t for g in parsed.config_groups.values() for t in g.targets)]:
        if entry.startswith("re:"):
            try:
                re.compile(entry[3:])
            except re.error as exc:
                raise FormatError(
                    f"{where}: pattern {entry!r} is not a valid regular expression ({exc}) "
                    f"(format {FORMAT_NAME!r})"
                ) from None
    return CtConfig(parsed, IgnoreList.from_config(qc, where, fields=("ignore",)))
