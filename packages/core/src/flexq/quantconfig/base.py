"""Reading what config.json says: a format's ``quantization_config`` and the model's dtype.

For formats: :func:`parse_quant_config` validates ``quantization_config``
against the format's pydantic model, so a bad value fails with the file, the
field and the format named (:func:`parse_json_model` does the same for JSON a
format stores in a tensor, :func:`read_config_file` reads a producer's own config
file); :func:`natural_dtype` is the dtype the unquantized
twin of the checkpoint has (what a logical tensor is when no dtype is asked).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from flexq.errors import FormatError
from flexq.io.jsonobj import json_object, read_json_file

if TYPE_CHECKING:
    from pathlib import Path

    from flexq.io.checkpoint import Checkpoint

M = TypeVar("M", bound=BaseModel)

#: Float dtypes a model's config may name for its unquantized weights.
_FLOATS = ("bfloat16", "float16", "float32")


class QuantConfig(BaseModel):
    """Base of a format's ``quantization_config`` model: unknown keys are kept, not refused
    (producers add keys freely), and values are checked as written (no coercion of
    ``"4"`` to ``4``). Schemas are built on first validation: discovery imports every
    installed format's models, and building them all cost a fresh process ~0.1 s."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, defer_build=True)


def parse_quant_config(model: type[M], ckpt: Checkpoint, format_name: str) -> M:
    """``ckpt.quantization_config`` validated as ``model``.

    :raises FormatError: naming config.json, the first bad field and the format.
    """
    return validate_config(
        model, ckpt.quantization_config, f"{ckpt.path / 'config.json'}: quantization_config",
        f"format {format_name!r}",
    )  # fmt: skip


def validate_config(model: type[M], qc: Mapping[str, Any], where: str, reader: str) -> M:
    """``qc`` (a ``quantization_config``) validated as ``model``, for readers that hold
    the mapping rather than the checkpoint (the core's detection).

    :param where: the file and field, ``"<dir>/config.json: quantization_config"``.
    :param reader: who reads it, for the message: ``"format 'fp8'"``.
    :raises FormatError: naming ``where``, the first bad field and ``reader``.
    """
    try:
        return model.model_validate(qc)
    except ValidationError as exc:
        field, err = _first_error(exc)
        raise FormatError(
            f"{where}.{field}: {err['msg']} (got {err.get('input')!r}; {reader})"
        ) from None


def parse_json_model(model: type[M], raw: bytes, where: str) -> M:
    """UTF-8 JSON bytes holding one object (a blob a producer stores in a U8 tensor,
    such as bitsandbytes' quant state) validated as ``model``.

    :param where: names the file, tensor and format in the errors.
    :raises FormatError: ``{where}: not valid JSON (...)``, ``{where}: not a JSON
        object (an array)``, or ``{where}: field 'x': <what is wrong>``.
    """
    try:
        doc = json_object(raw)
    except ValueError as exc:
        raise FormatError(f"{where}: {exc}") from None
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        field, err = _first_error(exc)
        raise FormatError(f"{where}: field {field!r}: {err['msg']}") from None


def read_config_file(path: Path, where: str) -> dict[str, Any]:
    """The JSON object of a producer's own config file beside config.json (AutoGPTQ's
    ``quantize_config.json``, ModelOpt's ``hf_quant_config.json``), read as flexq reads
    every JSON file: measured before it is read, bounded in depth, duplicate keys and
    lone surrogates refused.

    :param where: names the file and format in the errors.
    :raises FormatError: ``{where}: not valid JSON (...)``, ``... nested N levels
        deep ...``, ``... duplicate key 'k' ...``, or the file cannot be read.
    """
    try:
        return read_json_file(path)
    except ValueError as exc:
        raise FormatError(f"{where}: {exc}") from None
    except OSError as exc:
        raise FormatError(f"{where}: cannot be read ({exc})") from None


def _first_error(exc: ValidationError) -> tuple[str, Any]:
    """The dotted field of pydantic's first error, and the error."""
    err = exc.errors()[0]
    return ".".join(str(p) for p in err["loc"]) or "(top level)", err


def natural_dtype(ckpt: Checkpoint, default: str = "bfloat16") -> str:
    """The model's dtype from config.json (``torch_dtype`` or ``dtype``), else ``default``."""
    for name in ("torch_dtype", "dtype"):
        value = ckpt.config.get(name)
        if isinstance(value, str) and value.removeprefix("torch.") in _FLOATS:
            return value.removeprefix("torch.")
    return default
