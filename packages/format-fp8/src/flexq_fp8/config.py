"""What config.json's ``quantization_config`` says about FP8 weights.

Reads the three producer dialects: ``quant_method: fp8`` (AutoFP8 / vLLM /
DeepSeek / HF finegrained, with ``weight_block_size`` for block scales),
``fbgemm_fp8`` (per-channel) and ``compressed-tensors`` with
``format: float-quantized`` groups (tensor / channel / group / block
strategies) or ``mxfp8-quantized`` groups (group 32, E8M0 scales). Gives
the block sizes a scale grid may have and the modules the config excludes
from quantization (:class:`flexq.formatkit.IgnoreList`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from pydantic import Field, PositiveInt

from flexq import Checkpoint, FormatError
from flexq.formatkit import IgnoreList, QuantConfig, parse_quant_config
from flexq_fp8.identity import CT_FORMATS as CT_FORMATS
from flexq_fp8.identity import FORMAT_NAME as FORMAT_NAME

if TYPE_CHECKING:
    from flexq.formatkit import CtConfig, QuantArgs
    from flexq_fp8.layout import BlockCandidate

#: ``quant_method`` values whose configs describe FP8 weights.
METHODS = ("fp8", "fbgemm_fp8", "compressed-tensors")
#: ModelOpt ``quant_algo`` values (lower case) of square block scales whose size no
#: config records: ``FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG``'s ``fp8_pb_wo``.
MODELOPT_SQUARE_BLOCKS = frozenset({"fp8_pb_wo"})
#: ``quant_method`` values whose F8 weights another format decodes under its own config
#: rules (AMD Quark's schemes and excludes: flexq-format-quark); this format leaves them.
DECODED_ELSEWHERE = ("quark",)


class Fp8QuantConfig(QuantConfig):
    """The fields of an ``fp8`` ``quantization_config`` this format reads (others are kept,
    unread); compressed-tensors configs are the kit's one model (:class:`CtConfig`)."""

    quant_method: str = ""
    weight_block_size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)] | None = None


@dataclass(frozen=True)
class Fp8Config:
    """The FP8-relevant part of a checkpoint's config.

    :ivar method: ``quant_method`` (lower case) or "" when there is none.
    :ivar candidates: block sizes over [out, in] the config allows, in order of
        preference; None when the config does not say (infer from the grid).
    :ivar ignored: the modules the config leaves unquantized.
    :ivar square_algo: the ModelOpt ``quant_algo`` (``fp8_pb_wo``) whose one square
        block size the scale grids must give (:mod:`flexq_fp8.square`), else None.
    """

    method: str
    candidates: tuple[BlockCandidate, ...] | None
    ignored: IgnoreList
    square_algo: str | None = None


def read_config(ckpt: Checkpoint) -> Fp8Config:
    """Interpret ``ckpt.quantization_config``.

    :raises FormatError: on a malformed ``weight_block_size``, ignore list or block structure.
    """
    qc = ckpt.quantization_config
    ignored = IgnoreList.from_config(
        qc, f"{ckpt.path / 'config.json'} (format {FORMAT_NAME}): quantization_config"
    )
    method = str(qc.get("quant_method", "")).lower()
    algo = str(qc.get("quant_algo", "")).lower()
    if method == "modelopt" and algo in MODELOPT_SQUARE_BLOCKS:
        return Fp8Config(method, None, ignored, square_algo=algo)
    if method not in METHODS:
        return Fp8Config(method, None, ignored)
    if method == "compressed-tensors":
        # The one compressed-tensors model is imported for its configs only: building
        # its classes costs a fresh process ~6 ms CPU that an `fp8` config never needs.
        from flexq.formatkit import read_compressed_tensors

        ct = read_compressed_tensors(ckpt, FORMAT_NAME)
        assert ct is not None  # the method says so
        return Fp8Config(method, _compressed_tensors(ct), ignored)
    model = parse_quant_config(Fp8QuantConfig, ckpt, FORMAT_NAME)
    candidates: tuple[BlockCandidate, ...] | None = None
    if method == "fbgemm_fp8":
        candidates = ((1, None),)
    elif model.weight_block_size is not None:
        b0, b1 = model.weight_block_size
        candidates = ((b0, b1),)
    return Fp8Config(method, candidates, ignored)


def _compressed_tensors(ct: CtConfig) -> tuple[BlockCandidate, ...] | None:
    """The block sizes of the config's FP8 groups (8-bit float weights of :data:`CT_FORMATS`)."""
    found: list[BlockCandidate] = []
    for name, group in ct.groups_of(*CT_FORMATS):
        weights = group.weights
        if weights is None or weights.type != "float" or weights.num_bits != 8:
            continue
        found.append(_strategy(weights, f"{ct.where}.config_groups.{name}.weights"))
    return tuple(found) if found else None


def _strategy(weights: QuantArgs, where: str) -> BlockCandidate:
    strategy = weights.resolved_strategy()
    if strategy == "tensor":
        return None, None
    if strategy == "channel":
        return 1, None
    if strategy == "group":
        g = weights.group_size
        if g is None or g <= 0:
            raise FormatError(f"{where}.group_size must be a positive integer, got {g!r}")
        return 1, g
    if strategy == "block":
        return _pair(weights.block_structure, f"{where}.block_structure")
    raise FormatError(
        f"{where}.strategy {strategy!r} is not one FP8 weights use (format {FORMAT_NAME})"
    )


def _pair(value: object, where: str) -> tuple[int, int]:
    if (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return int(value[0]), int(value[1])
    raise FormatError(
        f"{where} must be two positive integers, got {value!r} (format {FORMAT_NAME})"
    )
