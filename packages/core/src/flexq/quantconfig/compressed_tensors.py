"""compressed-tensors' ``quantization_config``, modelled once: declared formats, config
groups and the scheme each module gets.

For every format that reads compressed-tensors checkpoints (ct-int, fp8, mxfp4, nvfp4)
and for the core's detection (:func:`flexq.plugin.known.config_methods`), so all read
one config the same way. llm-compressor writes (compressed-tensors 0.19.0)::

    {"quant_method": "compressed-tensors", "format": "pack-quantized",
     "config_groups": {"group_0": {"format": "pack-quantized", "targets": ["Linear"],
        "weights": {"num_bits": 4, "type": "int", "symmetric": true,
                    "strategy": "group", "group_size": 128, "actorder": null, ...},
        "input_activations": null}},
     "ignore": ["lm_head"], ...}

The rules, as compressed-tensors applies them:

- **declared formats**: the top-level ``format`` and each group's own (a group without
  one has the top-level one); ``mixed-precision`` only says the groups carry theirs, so
  it is not a format. ``dense`` is: it declares plain (unquantized) weights, which
  :data:`PLAIN_FORMATS` lists so that detection asks no format to decode them.
- **targets -> scheme**: the group whose targets match a module best, ranked as
  compressed-tensors' ``match_targets`` does: the exact module name, then a ``re:``
  pattern (:func:`re.match`), then a class name (``"Linear"``), which headers cannot
  check and so matches every quantized module.
- **ignore**: the kit's one rule for ignore lists (:class:`IgnoreList`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from flexq.errors import FormatError
from flexq.quantconfig.base import QuantConfig, validate_config
from flexq.quantconfig.ignore import IgnoreList

if TYPE_CHECKING:
    from flexq.io.checkpoint import Checkpoint

QUANT_METHOD = "compressed-tensors"
#: The top-level format of a config whose groups each name their own.
MIXED = "mixed-precision"
#: Declared formats whose weights are stored unquantized: no format decodes them.
PLAIN_FORMATS = frozenset({"dense"})


class QuantArgs(QuantConfig):
    """A group's ``weights`` / ``input_activations`` / ``output_activations``: how those
    tensors are quantized (compressed-tensors' ``QuantizationArgs``; fields it adds later
    are kept, unread)."""

    num_bits: int = 8
    type: str = "int"
    symmetric: bool = True
    strategy: str | None = None
    group_size: int | None = None
    block_structure: list[int] | None = None
    actorder: str | bool | None = None
    dynamic: bool | str = False

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
    """One ``config_groups`` entry (a compressed-tensors ``QuantizationScheme``)."""

    targets: list[str] = Field(default_factory=list)
    weights: QuantArgs | None = None
    input_activations: QuantArgs | None = None
    output_activations: QuantArgs | None = None
    format: str | None = None


class CompressedTensorsConfig(QuantConfig):
    """The fields of a compressed-tensors ``quantization_config`` flexq reads."""

    quant_method: str
    format: str | None = None
    version: str | None = None
    config_groups: dict[str, ConfigGroup] | None = None
    ignore: list[str] | None = None


@dataclass(frozen=True)
class CtScheme:
    """What the config says about one module.

    :ivar group: the ``config_groups`` entry name (for messages).
    :ivar format: the module's compressed-tensors format (``pack-quantized`` ...), None
        when neither its group nor the top level names one.
    """

    group: str
    format: str | None
    weights: QuantArgs | None
    input_activations: QuantArgs | None = None


@dataclass(frozen=True)
class CtConfig:
    """A parsed compressed-tensors config, with the lookups formats and detection need.

    :ivar where: ``"<dir>/config.json: quantization_config"``, for messages.
    """

    parsed: CompressedTensorsConfig
    ignored: IgnoreList
    where: str

    @property
    def groups(self) -> Mapping[str, ConfigGroup]:
        return self.parsed.config_groups or {}

    def format_of(self, group: ConfigGroup) -> str | None:
        """The format of ``group``: its own, else the top level's (None: mixed or unnamed)."""
        fmt = group.format or self.parsed.format
        return None if fmt == MIXED else fmt

    @property
    def declared_formats(self) -> frozenset[str]:
        """Every format the config declares, ``dense`` included (the module's rule)."""
        found = {self.parsed.format, *(self.format_of(g) for g in self.groups.values())}
        return frozenset(f for f in found if f and f != MIXED)

    @property
    def quantized_formats(self) -> frozenset[str]:
        """The declared formats of quantized weights (:data:`PLAIN_FORMATS` aside)."""
        return self.declared_formats - PLAIN_FORMATS

    def groups_of(self, *formats: str) -> list[tuple[str, ConfigGroup]]:
        """The (name, group) pairs whose format is one of ``formats``, in config order."""
        return [(n, g) for n, g in self.groups.items() if self.format_of(g) in formats]

    def ignored_by(self, module: str) -> str | None:
        """The ``ignore`` entry that covers ``module``, if any."""
        hit = self.ignored.match(module)
        return None if hit is None else hit[1]

    def scheme_for(self, module: str) -> CtScheme | None:
        """The scheme of the best-matching group for ``module`` (None: no group targets it)."""
        best: tuple[int, str, str] | None = None
        for name, group in self.groups.items():
            for target in group.targets:
                rank = _target_rank(module, target)
                # A later group's identical target replaces an earlier one (as
                # compressed-tensors' target -> scheme map does); ties otherwise
                # go to the target that sorts first.
                if rank is not None and (best is None or (rank, target) <= best[:2]):
                    best = (rank, target, name)
        if best is None:
            return None
        group = self.groups[best[2]]
        return CtScheme(best[2], self.format_of(group), group.weights, group.input_activations)


def _target_rank(module: str, target: str) -> int | None:
    """0 exact name, 1 regex, 2 class name (assumed to match), None no match."""
    if target.startswith("re:"):
        return 1 if re.match(target[3:], module) else None
    if target == module:
        return 0
    # Module paths have dots; a dotless target that is not this module's name is
    # a class name ("Linear"), which every quantized module is taken to be.
    return 2 if "." not in target else None


def is_compressed_tensors(qc: Mapping[str, Any]) -> bool:
    """Whether ``quantization_config`` ``qc`` is compressed-tensors'."""
    return str(qc.get("quant_method", "")).lower() == QUANT_METHOD


def parse_compressed_tensors(qc: Mapping[str, Any], where: str, reader: str) -> CtConfig:
    """``qc`` (a compressed-tensors ``quantization_config``) as a :class:`CtConfig`.

    :param where: ``"<dir>/config.json: quantization_config"``, for messages.
    :param reader: who reads it, for messages (``"format 'ct-int'"``).
    :raises FormatError: naming ``where``, the bad field (or the pattern that is not a
        regular expression) and ``reader``.
    """
    parsed = validate_config(CompressedTensorsConfig, qc, where, reader)
    groups = (parsed.config_groups or {}).values()
    for entry in [*(parsed.ignore or ()), *(t for g in groups for t in g.targets)]:
        if entry.startswith("re:"):
            try:
                re.compile(entry[3:])
            except re.error as exc:
                raise FormatError(
                    f"{where}: pattern {entry!r} is not a valid regular expression ({exc}) "
                    f"({reader})"
                ) from None
    ignored = IgnoreList(tuple(("ignore", e) for e in parsed.ignore or ()))
    return CtConfig(parsed, ignored, where)


def read_compressed_tensors(ckpt: Checkpoint, format_name: str) -> CtConfig | None:
    """The compressed-tensors config of ``ckpt`` read for format ``format_name``; None
    when its ``quant_method`` is another.

    :raises FormatError: when the config is malformed (naming file, field and format).
    """
    qc = ckpt.quantization_config
    if not is_compressed_tensors(qc):
        return None
    where = f"{ckpt.path / 'config.json'}: quantization_config"
    return parse_compressed_tensors(qc, where, f"format {format_name!r}")
