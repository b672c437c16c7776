"""Find the compressed-tensors integer weights of a checkpoint, from headers and config.

Memoized per :class:`flexq.Checkpoint` (the core asks per-tensor hooks many
times). Rules, each pinned by a test:

- ``X.weight_packed`` I32 is pack-quantized; it needs the compressed-tensors
  config (``num_bits`` is nowhere else), a group targeting ``X`` whose format
  is ``pack-quantized`` with ``type: int``, ``X.weight_scale`` and
  ``X.weight_shape``. U8 ``weight_packed`` (MXFP4, NVFP4) is never looked at.
- ``X.weight`` I8 beside ``X.weight_scale`` is int-quantized; under a
  compressed-tensors config its group must say ``int-quantized``; without any
  quantization config the strategy is read off the scale's shape.
- asymmetric groups need ``X.weight_zero_point``, symmetric ones must not have
  one; pack-quantized group and channel zero points are packed along out (I32
  ``[ceil(out*bits/32), groups]``) or, as compressed-tensors wrote them before
  April 2025, one signed integer per scale; group act-order needs ``X.weight_g_idx``.
- a quantized tensor in a module ``ignore`` lists is an error; every broken or
  missing companion is a :class:`flexq.FormatError` naming file, tensor and format.
- ``input_scale`` / ``input_zero_point`` (activation parameters) are never claimed.
- 3, 5, 6 and 7-bit codes are packed per word (compressed-tensors 0.17) or
  densely (0.18 on): the config's ``version`` decides; without one it is an error.
- ``in_features`` comes from the headers when they pin it (the packed width
  allows ``32/bits`` values; a group or block grid narrows that, and a group
  strategy pins it exactly). Otherwise -- channel and tensor strategies, whose
  packed width rounds ``in`` up to a word -- ``X.weight_shape`` (16 bytes) is
  read, the only tensor data read before a load.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from flexq import Checkpoint, FormatError, TensorInfo
from flexq.formatkit import FLOAT_SCALE_DTYPES, Analysis, cached_per_checkpoint, natural_dtype
from flexq_ct_int.config import FORMAT_NAME, INT, PACK, read_config
from flexq_ct_int.layout import CtLinear, Kind, ZeroKind
from flexq_ct_int.packing import DENSE_SINCE, SUPPORTED_BITS, Packing, parse_version

if TYPE_CHECKING:
    from flexq.formatkit import CtConfig, QuantArgs

SCALE_DTYPES = FLOAT_SCALE_DTYPES
ZERO_DTYPES = ("I8", "I16", "I32")
SHAPE_DTYPES = ("I64", "I32")
GIDX_DTYPES = ("I32", "I64")
STRATEGIES = ("tensor", "channel", "group", "block")
#: Companion suffixes this format owns (an orphaned one is reported by the core).
_COMPANIONS = (".weight_shape", ".weight_g_idx", ".weight_zero_point")


@cached_per_checkpoint
def analyze(ckpt: Checkpoint) -> Analysis[CtLinear]:
    """The integer compressed-tensors weights of ``ckpt`` by logical key (``X.weight``),
    and every physical key that is this format's component, used or orphaned
    (memoized per checkpoint object).

    :raises FormatError: on a weight that is clearly this format's but broken.
    """
    config = read_config(ckpt)
    other_method = config is None and bool(ckpt.quantization_config.get("quant_method"))
    linears: dict[str, CtLinear] = {}
    for key, info in ckpt.tensors.items():
        module, _, last = key.rpartition(".")
        if last == "weight_packed" and info.dtype == "I32":
            lin = _Finder(ckpt, module, config, info).packed()
        elif last == "weight" and info.dtype == "I8" and f"{module}.weight_scale" in ckpt.tensors:
            if other_method:
                continue  # another quantization method's int8 layout
            lin = _Finder(ckpt, module, config, info).int8()
        else:
            continue
        linears[lin.key] = lin
    used = {k for lin in linears.values() for k in lin.sources}
    orphans = {k for k in ckpt.tensors if k not in used and _is_orphan(ckpt, k)}
    dtype = _natural_dtype(ckpt, linears)
    tensors = {k: replace(lin, dtype=dtype) for k, lin in linears.items()}
    return Analysis(tensors, frozenset(used | orphans))


def _is_orphan(ckpt: Checkpoint, key: str) -> bool:
    """A companion of ours beside no quantized weight at all."""
    if not key.endswith(_COMPANIONS):
        return False
    module = key.rpartition(".")[0]
    if f"{module}.weight_packed" in ckpt.tensors:
        return False  # another format's packed weight (or reported with ours)
    weight = ckpt.tensors.get(f"{module}.weight")
    return weight is None or weight.dtype in ("BF16", "F16", "F32")


def _natural_dtype(ckpt: Checkpoint, linears: dict[str, CtLinear]) -> str:
    # Without a dtype in config.json: compressed-tensors stores scales in the model's dtype.
    dtypes = {lin.scale_dtype for lin in linears.values()}
    return natural_dtype(ckpt, SCALE_DTYPES[dtypes.pop()] if len(dtypes) == 1 else "bfloat16")


class _Finder:
    """Checks one module's tensors and describes its linear."""

    def __init__(
        self, ckpt: Checkpoint, module: str, config: CtConfig | None, weight: TensorInfo
    ) -> None:
        self.ckpt, self.module, self.config, self.weight = ckpt, module, config, weight

    def fail(self, key: str, message: str) -> FormatError:
        info = self.ckpt.tensors.get(key)
        file = info.file if info is not None else self.weight.file
        return FormatError(f"{file}: tensor {key!r}: {message} (format {FORMAT_NAME!r})")

    def companion(self, suffix: str, dtypes: tuple[str, ...] | dict[str, str]) -> TensorInfo:
        key = f"{self.module}.{suffix}"
        info = self.ckpt.tensors.get(key)
        if info is None:
            raise self.fail(self.weight.key, f"has no companion {key!r} (missing component)")
        if info.dtype not in dtypes:
            raise self.fail(key, f"has dtype {info.dtype}, expected {' or '.join(dtypes)}")
        return info

    def scheme(self, fmt: str) -> QuantArgs | None:
        """The config's weight args for this module (None: no config), checked against ``fmt``."""
        if self.config is None:
            return None
        key = self.weight.key
        entry = self.config.ignored_by(self.module)
        if entry is not None:
            raise self.fail(
                key,
                f"is quantized, but quantization_config.ignore lists {entry!r}, so readers "
                "would treat it as an unquantized layer",
            )
        scheme = self.config.scheme_for(self.module)
        if scheme is None:
            raise self.fail(
                key, "is quantized, but no quantization_config.config_groups entry targets it"
            )
        where = f"quantization_config.config_groups.{scheme.group}"
        if scheme.format != fmt:
            raise self.fail(
                key,
                f"is laid out as {fmt}, but {where} declares format {scheme.format!r}",
            )
        if scheme.weights is None or scheme.weights.type != "int":
            kind = None if scheme.weights is None else scheme.weights.type
            raise self.fail(key, f"is {fmt}, but {where}.weights.type is {kind!r}, not 'int'")
        strategy = scheme.weights.resolved_strategy()
        if strategy not in STRATEGIES:
            raise self.fail(key, f"{where}.weights.strategy {strategy!r} is not one for weights")
        return scheme.weights

    # -- pack-quantized -------------------------------------------------------
    def packed(self) -> CtLinear:
        key = self.weight.key
        if self.config is None:
            raise self.fail(
                key,
                "is compressed-tensors pack-quantized (I32 weight_packed), but config.json has "
                "no compressed-tensors quantization_config, which alone gives num_bits",
            )
        args = self.scheme(PACK)
        assert args is not None
        bits = args.num_bits
        if bits not in SUPPORTED_BITS:
            raise self.fail(key, f"has num_bits {bits}, not one of {SUPPORTED_BITS}")
        packing = self.packing(bits)
        if len(self.weight.shape) != 2:
            raise self.fail(key, f"has shape {self.weight.shape}, expected [out, words]")
        out_f, width = self.weight.shape
        if out_f == 0 or width == 0:
            raise self.fail(key, f"has an empty shape {self.weight.shape}")
        scale = self.companion("weight_scale", SCALE_DTYPES)
        shape = self.companion("weight_shape", SHAPE_DTYPES)
        if shape.shape != (2,):
            raise self.fail(shape.key, f"has shape {shape.shape}, expected (2,)")
        strategy = args.resolved_strategy()
        block0, candidates = self.grid(args, strategy, scale, out_f, packing.counts(width))
        in_f = self.in_features(shape, out_f, candidates, bits)
        block = self.block(block0, strategy, out_f, in_f, args)
        return self.linear(PACK, args, strategy, scale, (out_f, in_f), block, packing, shape.key)

    def linear(
        self,
        kind: Kind,
        args: QuantArgs | None,
        strategy: str,
        scale: TensorInfo,
        shape: tuple[int, int],
        block: tuple[int, int],
        packing: Packing,
        shape_key: str | None,
    ) -> CtLinear:
        """The layout of the module's checked weight, with its zero point and g_idx checked."""
        out_f, in_f = shape
        zero, zkey, zdtype = self.zero_point(args, strategy, scale, out_f, packing)
        return CtLinear(
            key=f"{self.module}.weight",
            kind=kind,
            weight_key=self.weight.key,
            scale_key=scale.key,
            out_features=out_f,
            in_features=in_f,
            bits=packing.bits,
            block=block,
            scale_grid=self.grid_shape(scale),
            scale_shape=scale.shape,
            scale_dtype=scale.dtype,
            zero=zero,
            zero_key=zkey,
            zero_dtype=zdtype,
            shape_key=shape_key,
            gidx_key=self.group_index(args, strategy, in_f),
            dense=packing.dense,
        )

    def packing(self, bits: int) -> Packing:
        """The packing of ``bits``-wide codes; odd widths need the config's version."""
        if Packing(bits).aligned:
            return Packing(bits)
        assert self.config is not None
        version = parse_version(self.config.parsed.version)
        if version is None:
            raise self.fail(
                self.weight.key,
                f"has num_bits {bits}: compressed-tensors packed {bits}-bit codes "
                f"{32 // bits} per int32 word in 0.17 and densely across words since 0.18, "
                "and quantization_config.version (which tells them apart) is "
                f"{self.config.parsed.version!r}",
            )
        return Packing(bits, dense=version >= DENSE_SINCE)

    def grid(
        self,
        args: QuantArgs,
        strategy: str,
        scale: TensorInfo,
        out_f: int,
        candidates: range,
    ) -> tuple[tuple[int, int] | None, list[int]]:
        """Check the scale's shape for the strategy; narrow the in_features candidates.

        :return: the block over (out, in) when the strategy fixes it (group, block), and the
            in_features values the packed width and the scale grid both allow.
        """
        shape = scale.shape
        if strategy == "tensor":
            ok, block, allowed = _one(shape), None, list(candidates)
        elif strategy == "channel":
            ok, block, allowed = shape == (out_f, 1), None, list(candidates)
        elif strategy == "group":
            g = self.positive(args.group_size, "group_size")
            ng = shape[1] if len(shape) == 2 else 0
            ok, block = len(shape) == 2 and shape[0] == out_f, (1, g)
            # compressed-tensors requires in % g == 0 once in >= g.
            allowed = [c for c in candidates if -(-c // g) == ng and (c < g or c % g == 0)]
        else:
            b0, b1 = self.block_structure(args)
            ok = len(shape) == 2 and shape[0] == -(-out_f // b0)
            block = (b0, b1)
            allowed = [c for c in candidates if len(shape) == 2 and -(-c // b1) == shape[1]]
        if not ok or not allowed:
            raise self.fail(
                scale.key,
                f"has shape {shape}, which does not fit {strategy} scales of weight "
                f"{self.weight.key!r} {self.weight.shape} ({args.num_bits}-bit codes"
                + (f", group_size {args.group_size})" if strategy == "group" else ")"),
            )
        return block, allowed

    def in_features(self, shape: TensorInfo, out_f: int, allowed: list[int], bits: int) -> int:
        if len(allowed) == 1:
            return allowed[0]
        # The headers leave in_features open: read the producer's own record (16 bytes).
        recorded = tuple(int(v) for v in self.ckpt.read(shape.key))
        if recorded[0] != out_f or recorded[1] not in allowed:
            raise self.fail(
                shape.key,
                f"says {recorded}, but {self.weight.key!r} {self.weight.shape} of {bits}-bit "
                f"codes holds [{out_f}, {allowed[0]}..{allowed[-1]}]",
            )
        return recorded[1]

    @staticmethod
    def block(
        fixed: tuple[int, int] | None, strategy: str, out_f: int, in_f: int, args: QuantArgs
    ) -> tuple[int, int]:
        if fixed is not None:
            return fixed
        return (out_f, in_f) if strategy == "tensor" else (1, in_f)

    @staticmethod
    def grid_shape(scale: TensorInfo) -> tuple[int, int]:
        return (scale.shape[0], scale.shape[1]) if len(scale.shape) == 2 else (1, 1)

    def positive(self, value: int | None, field: str) -> int:
        if value is None or value <= 0:
            raise self.fail(
                self.weight.key,
                f"its config group's weights.{field} is {value!r}, expected a positive integer",
            )
        return value

    def block_structure(self, args: QuantArgs) -> tuple[int, int]:
        bs = args.block_structure
        if bs is None or len(bs) != 2:
            raise self.fail(
                self.weight.key,
                f"its config group's weights.block_structure is {bs!r}, expected [rows, cols]",
            )
        return self.positive(bs[0], "block_structure"), self.positive(bs[1], "block_structure")

    def zero_point(
        self,
        args: QuantArgs | None,
        strategy: str,
        scale: TensorInfo,
        out_f: int,
        packing: Packing,
    ) -> tuple[ZeroKind, str | None, str | None]:
        key = f"{self.module}.weight_zero_point"
        info = self.ckpt.tensors.get(key)
        symmetric = args.symmetric if args is not None else info is None
        if symmetric:
            if info is not None:
                raise self.fail(key, "is present, but the config group's weights are symmetric")
            return "none", None, None
        info = self.companion("weight_zero_point", ZERO_DTYPES)
        packs = self.weight.dtype == "I32" and strategy in ("group", "channel")
        if packs:
            want = (packing.width(out_f), scale.shape[1] if len(scale.shape) == 2 else 1)
            if info.dtype == "I32" and info.shape == want:
                return "packed", key, info.dtype
            # compressed-tensors before April 2025 (its PR 296) stored them unpacked.
            if info.shape != scale.shape:
                raise self.fail(
                    key,
                    f"is {info.dtype} {info.shape}, expected I32 {want} (zero points packed "
                    f"along out, {packing.bits}-bit) or unpacked in the scale's shape "
                    f"{scale.shape}",
                )
        if info.shape != scale.shape:
            raise self.fail(key, f"has shape {info.shape}, expected the scale's {scale.shape}")
        return "raw", key, info.dtype

    def group_index(self, args: QuantArgs | None, strategy: str, in_f: int) -> str | None:
        key = f"{self.module}.weight_g_idx"
        info = self.ckpt.tensors.get(key)
        if info is None:
            if args is not None and args.act_order and strategy == "group":
                raise self.fail(
                    self.weight.key, f"uses group act-order, but has no companion {key!r}"
                )
            return None
        if strategy != "group":
            raise self.fail(
                key, f"is present, but the weights' strategy is {strategy!r}, not group"
            )
        if info.dtype not in GIDX_DTYPES or info.shape != (in_f,):
            raise self.fail(key, f"is {info.dtype} {info.shape}, expected I32 ({in_f},)")
        return key

    # -- int-quantized --------------------------------------------------------
    def int8(self) -> CtLinear:
        key = self.weight.key
        args = self.scheme(INT)
        if len(self.weight.shape) != 2 or 0 in self.weight.shape:
            raise self.fail(key, f"has shape {self.weight.shape}, expected [out, in]")
        out_f, in_f = self.weight.shape
        scale = self.companion("weight_scale", SCALE_DTYPES)
        if args is not None:
            strategy = args.resolved_strategy()
            block = self.grid(args, strategy, scale, out_f, range(in_f, in_f + 1))[0]
            block = self.block(block, strategy, out_f, in_f, args)
        else:
            strategy, block = self.infer(scale, out_f, in_f)
        return self.linear(INT, args, strategy, scale, (out_f, in_f), block, Packing(8), None)

    def infer(self, scale: TensorInfo, out_f: int, in_f: int) -> tuple[str, tuple[int, int]]:
        """Strategy and block from the scale's shape alone (no quantization config)."""
        shape = scale.shape
        if _one(shape):
            return "tensor", (out_f, in_f)
        if len(shape) == 2 and shape[0] >= 1 and shape[1] >= 1:
            b0 = -(-out_f // shape[0])
            b1 = -(-in_f // shape[1])
            if -(-out_f // b0) == shape[0] and -(-in_f // b1) == shape[1]:
                if shape == (out_f, 1):
                    return "channel", (1, in_f)
                return ("group" if b0 == 1 else "block"), (b0, b1)
        raise self.fail(
            scale.key,
            f"has shape {shape}, which is no scale grid of {self.weight.key!r} {self.weight.shape}",
        )


def _one(shape: tuple[int, ...]) -> bool:
    return all(d == 1 for d in shape)
