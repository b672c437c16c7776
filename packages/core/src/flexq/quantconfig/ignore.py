"""The one rule for the lists of modules a quantization config leaves unquantized.

For formats: HF ``modules_to_not_convert``, vLLM / AutoFP8 ``ignored_layers``,
compressed-tensors ``ignore``, bitsandbytes ``llm_int8_skip_modules`` and
ModelOpt ``exclude_modules`` all name modules the same way, so every format
matches them with :class:`IgnoreList`:

A tensor key matches an entry when the entry matches the key itself or one of
its parent modules (``a.b.c.weight`` -> ``a.b.c.weight``, ``a.b.c``, ``a.b``,
``a``):

- ``re:<regex>`` (compressed-tensors): :func:`re.match`, anchored at the start;
- anything else is a module name, glob wildcards (``*``, ``?``, ``[...]``)
  allowed: it matches a name it equals (as a glob), or a dotted run of whole
  components inside the key (``lm_head`` matches ``model.lm_head.weight``,
  ``mlp.gate`` matches ``model.layers.0.mlp.gate.weight``; ``gate`` does not
  match ``gate_proj``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from flexq.errors import FormatError

#: quantization_config fields that list unquantized modules, as producers spell them.
IGNORE_FIELDS = (
    "ignored_layers",
    "modules_to_not_convert",
    "ignore",
    "llm_int8_skip_modules",
    "exclude_modules",
)


@dataclass(frozen=True)
class IgnoreList:
    """The ignore entries of one config.

    :ivar entries: (config field, entry) pairs, in config order.
    """

    entries: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(
        cls, qc: Mapping[str, Any], where: str, fields: Sequence[str] = IGNORE_FIELDS
    ) -> IgnoreList:
        """The entries of ``fields`` in ``quantization_config`` ``qc``.

        :param where: "config.json path: quantization_config" for error messages.
        :raises FormatError: when a field is not a list of strings.
        """
        found: list[tuple[str, str]] = []
        for field in fields:
            value = qc.get(field)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise FormatError(f"{where}.{field} must be a list of module names, got {value!r}")
            found.extend((field, v) for v in value)
        return cls(tuple(found))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def match(self, key: str) -> tuple[str, str] | None:
        """The first (field, entry) that covers tensor or module ``key``, or None."""
        for field, entry in self.entries:
            if matches(entry, key):
                return field, entry
        return None

    def refuse(
        self,
        key: str,
        *,
        file: str,
        tensor: str,
        stored: str,
        format_name: str,
        config: str = "quantization_config",
    ) -> None:
        """Refuse a tensor stored quantized whose module ``key`` this list leaves
        unquantized: readers that honour the list would load its packed values as
        weights, so the checkpoint contradicts itself.

        :param key: the tensor or module key matched against the entries.
        :param file: the file holding the quantized tensor.
        :param tensor: the quantized tensor's key.
        :param stored: how it is stored, e.g. ``"F8_E4M3"`` or ``"stored as MXFP4"``
            (the message says "tensor 'x' is <stored>").
        :param config: where the list lives, e.g. ``"<dir>/hf_quant_config.json: quantization"``.
        :raises FormatError: naming the file, tensor, list field, entry and format.
        """
        hit = self.match(key)
        if hit is not None:
            field, entry = hit
            raise FormatError(
                f"{file}: tensor {tensor!r} is {stored}, but {config}.{field} lists "
                f"{entry!r}, which covers its module, as not quantized (format {format_name!r})"
            )


def matches(entry: str, key: str) -> bool:
    """Whether ignore-list ``entry`` covers tensor or module ``key`` (the module rule)."""
    parts = key.split(".")
    names = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
    if entry.startswith("re:"):
        pattern = re.compile(entry[3:])
        return any(pattern.match(name) for name in names)
    if any(fnmatchcase(name, entry) for name in names):
        return True
    return f".{entry}." in f".{key}."
