"""What config.json's ``quantization_config`` says about AutoAWQ INT4 weights.

Read by :mod:`flexq_int4_awq.detect`. The pydantic model checks the types of
the keys AutoAWQ and transformers write (``bits`` / ``w_bit``, ``group_size``
/ ``q_group_size``, ``zero_point``, ``version``, the ignore lists);
:func:`read_config` then checks what this format can decode, each error naming
config.json, the key and the format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from flexq import Checkpoint, FormatError
from flexq.formatkit import IgnoreList, QuantConfig, parse_quant_config
from flexq_int4_awq.identity import FORMAT_NAME as FORMAT_NAME

Version = Literal["gemm", "gemv"]


class AwqQuantConfig(QuantConfig):
    """The ``quantization_config`` keys of an AWQ checkpoint, as producers spell them."""

    quant_method: str
    bits: int | None = None
    w_bit: int | None = None
    group_size: int | None = None
    q_group_size: int | None = None
    zero_point: bool = True
    version: str = "gemm"


@dataclass(frozen=True)
class AwqConfig:
    """The ``quantization_config`` keys this format reads, validated.

    :ivar group_size: as written in the config; -1 means one group over the whole input.
    :ivar zero_point: the config's flag. auto-round's ``auto_awq`` export writes
        false over standard GEMM tensors whose ``qzeros`` all hold 8, so the
        decoder uses the stored zeros either way; false only changes the error
        when ``qzeros`` is missing.
    """

    bits: int
    group_size: int
    zero_point: bool
    version: Version
    ignored: IgnoreList


def read_config(ckpt: Checkpoint) -> AwqConfig | None:
    """The AWQ keys of ``quantization_config``, checked; None if not an AWQ checkpoint.

    :raises FormatError: on a key this format cannot decode.
    """
    qc = ckpt.quantization_config
    method = qc.get("quant_method")
    if not isinstance(method, str) or method.lower() != "awq":
        return None
    where = f"{ckpt.path / 'config.json'}: quantization_config"

    def fail(msg: str) -> FormatError:
        return FormatError(f"{where}: {msg} (format {FORMAT_NAME!r})")

    model = parse_quant_config(AwqQuantConfig, ckpt, FORMAT_NAME)
    bits = _either(model.bits, model.w_bit, ("bits", "w_bit"), fail)
    if bits != 4:
        raise fail(f"{bits}-bit AWQ is not supported; AutoAWQ packs 4-bit weights only")
    group_size = _either(model.group_size, model.q_group_size, ("group_size", "q_group_size"), fail)
    if group_size != -1 and group_size <= 0:
        raise fail(f"group_size must be -1 or positive, got {group_size}")
    version = model.version.lower()
    if version not in ("gemm", "gemv"):
        raise fail(f"version {model.version!r} is not supported (supported: 'gemm', 'gemv')")
    ignored = IgnoreList.from_config(
        qc, f"{ckpt.path / 'config.json'} (format {FORMAT_NAME!r}): quantization_config"
    )
    v: Version = "gemm" if version == "gemm" else "gemv"
    return AwqConfig(bits, group_size, model.zero_point, v, ignored)


def _either(
    a: int | None, b: int | None, names: tuple[str, str], fail: Callable[[str], FormatError]
) -> int:
    """The integer under either spelling ``names`` of a key (AutoAWQ's, transformers')."""
    found = {n: v for n, v in zip(names, (a, b), strict=True) if v is not None}
    if not found:
        raise fail(f"needs {names[0]!r} (or {names[1]!r})")
    if len(set(found.values())) > 1:
        raise fail(f"{names[0]!r} and {names[1]!r} disagree: {found}")
    return next(iter(found.values()))
