"""The JSON documents the ``flexq`` command prints, as pydantic models with a published schema.

For scripts that read ``flexq inspect --json`` and ``flexq list-formats --json``:
the schemas are in docs/schema/ (generated from these models by
:func:`json_schema`; a test keeps them current). :func:`formats_page` renders
docs/formats.md from the installed formats the same way.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from flexq.check.report import VerifyReport
from flexq.errors import TargetError
from flexq.load.kept_forms import NVFP4_RULE, SCALE_TARGETS, VALUE_TARGETS, form_of
from flexq.plugin import passthrough
from flexq.plugin.known import config_methods

if TYPE_CHECKING:
    from flexq.composition import Composition
    from flexq.plugin.manager import FormatInfo


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Component(_Document):
    """One physical tensor a logical tensor is built from."""

    key: str = Field(description="name of the tensor in the safetensors file")
    dtype: str = Field(description="safetensors dtype string (F8_E4M3, U8, BF16, ...)")
    shape: list[int] = Field(description="shape in header elements")
    file: str = Field(description="the safetensors file that holds it")


class KeptPart(_Document):
    """One part of a kept form: the dtypes a kept target's tensor may have, and its shape."""

    dtypes: list[str] = Field(
        description="Paddle dtypes the part may have (the first is the form's own)"
    )
    shape: list[int] = Field(description="global shape of the part")


class KeptFormRow(_Document):
    """One kept (quantized) form a :class:`flexq.QuantizedTarget` can receive (docs/formats.md)."""

    form: Literal["fp8", "mxfp4", "nvfp4"]
    values: KeptPart
    scales: KeptPart
    global_scale: KeptPart | None = Field(description="NVFP4's float32 [1] global scale")
    block: list[int] | None = Field(
        description="the checkpoint's block over the values' last two axes, in kept units "
        "(bytes for FP4 values); null for one per-tensor scale"
    )
    rule: str = Field(description="how the kept parts dequantize")


class LogicalTensorRow(_Document):
    """One logical tensor: what a load fills, and the components it is decoded from."""

    key: str = Field(description="logical name (what AOA statements and targets use)")
    format: str = Field(description="the format that decodes it, or 'passthrough'")
    shape: list[int]
    dtype: str = Field(description="natural dtype of the dequantized tensor")
    components: list[Component]
    kept_forms: list[KeptFormRow] = Field(
        default_factory=list,
        description="the kept forms a QuantizedTarget can load it in (empty: dequantize only)",
    )


class InspectDocument(_Document):
    """``flexq inspect --json``: the composed view of one checkpoint."""

    path: str = Field(description="the checkpoint directory")
    formats: list[str] = Field(description="the formats that were asked")
    tensors: list[LogicalTensorRow] = Field(description="every logical tensor, sorted by key")
    problems: list[str] = Field(description="what is wrong (inspect exits 2 when non-empty)")
    unclaimed: list[str] = Field(
        description="tensors that look quantized but pass through as stored (--allow-unclaimed)"
    )
    total_bytes: int = Field(description="bytes of every tensor in the files")


class FormatRow(_Document):
    """One installed or registered format."""

    name: str
    version: str
    distribution: str = Field(description="the distribution that provides it ('' at run time)")
    source: Literal["entry point", "runtime"]
    description: str
    error: str | None = Field(description="why the format failed to load (null when it works)")
    methods: list[str] = Field(
        description="quant_method values it decodes; compressed-tensors formats as "
        "'compressed-tensors/<format>'"
    )


class FormatList(RootModel[list[FormatRow]]):
    """``flexq list-formats --json``: every format, sorted by name."""


#: document name -> model (docs/schema/<name>.json).
DOCUMENTS: dict[str, type[BaseModel]] = {
    "inspect": InspectDocument,
    "list-formats": FormatList,
    "verify": VerifyReport,
}


def json_schema(name: str) -> str:
    """The published JSON schema of document ``name``, as written to docs/schema/."""
    return json.dumps(DOCUMENTS[name].model_json_schema(), indent=2) + "\n"


def unclaimed(ct: Composition) -> list[str]:
    """Tensors that look quantized yet pass through (composed with ``allow_unclaimed``)."""
    ckpt = ct.checkpoint
    return sorted(
        key
        for key, e in ct.entries.items()
        if e.is_passthrough and passthrough.looks_quantized(key, ckpt.info(key)) is not None
    )


def unclaimed_methods(ct: Composition, claimed: set[str]) -> list[str]:
    """The config's quantization methods that none of ``claimed`` decodes."""
    return sorted(config_methods(ct.checkpoint.quantization_config) - claimed)


def inspect_document(ct: Composition) -> InspectDocument:
    """What ``flexq inspect --json`` prints for a composed checkpoint."""
    ckpt = ct.checkpoint
    tensors = [
        LogicalTensorRow(
            key=key,
            format=e.owner,
            shape=list(e.shape),
            dtype=e.dtype,
            components=[
                Component(
                    key=s,
                    dtype=ckpt.stored_dtype(s),
                    shape=list(ckpt.info(s).shape),
                    file=ckpt.info(s).file,
                )
                for s in e.sources
            ],
            kept_forms=kept_rows(ct, key),
        )
        for key, e in sorted(ct.entries.items())
    ]
    return InspectDocument(
        path=str(ckpt.path),
        formats=ct.formats,
        tensors=tensors,
        problems=ct.problems,
        unclaimed=unclaimed(ct),
        total_bytes=sum(t.nbytes for t in ckpt.tensors.values()),
    )


#: How each kept form dequantizes (docs/formats.md, "Kept forms").
_RULES = {
    "fp8": "W = float32(values) * scales (per tensor, channel or block)",
    "mxfp4": "W = e2m1(values) * 2^(scales - 127) per 32 elements",
    "nvfp4": NVFP4_RULE + " per 16 elements",
}


def kept_rows(ct: Composition, key: str) -> list[KeptFormRow]:
    """The kept forms of logical tensor ``key`` (none when it has no kept form)."""
    try:
        form = form_of(ct, key)
    except TargetError:
        return []
    scale_shape = [1] if form.per_tensor else list(form.grid)
    glob = KeptPart(dtypes=["float32"], shape=[1]) if form.kind == "nvfp4" else None
    return [
        KeptFormRow(
            form=form.kind,
            values=KeptPart(dtypes=[VALUE_TARGETS[form.kind]], shape=list(form.shape)),
            scales=KeptPart(dtypes=list(SCALE_TARGETS[form.kind]), shape=scale_shape),
            global_scale=glob,
            block=None if form.per_tensor else list(form.block[-2:]),
            rule=_RULES[form.kind],
        )
    ]


def format_list(rows: list[FormatInfo]) -> FormatList:
    """What ``flexq list-formats --json`` prints."""
    return FormatList(
        [
            FormatRow(
                name=r.name,
                version=r.version,
                distribution=r.distribution,
                source="runtime" if r.source == "runtime" else "entry point",
                description=r.description,
                error=r.error,
                methods=list(r.methods),
            )
            for r in rows
        ]
    )


def formats_page(rows: list[FormatInfo]) -> str:
    """docs/formats.md: the installed formats and the config methods each decodes."""
    lines = [
        "# Supported formats",
        "",
        "Generated from `flexq list-formats` with every format package of this repository",
        "installed (`tests/test_docs.py` keeps it current). A checkpoint's",
        "`quantization_config.quant_method` (for compressed-tensors, each config group's",
        "`format`, a group without one taking the top-level one, written",
        "`compressed-tensors/<format>`; `dense` weights need none) says which format",
        "decodes it; a method no installed format claims is refused (see",
        "[troubleshooting](troubleshooting.md#unclaimed-quantization)).",
        "",
        "| format | distribution | claims | what it decodes |",
        "|---|---|---|---|",
    ]
    for r in rows:
        if r.source != "entry point":
            continue
        methods = ", ".join(f"`{m}`" for m in r.methods) or "(tensors only)"
        lines.append(f"| `{r.name}` | `{r.distribution}` | {methods} | {r.description} |")
    return "\n".join([*lines, *KEPT_FORMS]) + "\n"


#: The kept forms section of docs/formats.md (what :mod:`flexq.load.kept` loads).
KEPT_FORMS = [
    "",
    "## Kept forms",
    "",
    "A `flexq.QuantizedTarget(values, scales, global_scale=None, block=None)` in",
    "`flexq.load_state_dict`'s state dict, keyed by a logical name, receives that",
    "tensor as the checkpoint stores it instead of dequantized: the values byte for",
    "byte, the scales converted only where exact. Its parts may each be a plain",
    "tensor, a dist tensor or a ShardedWeight (a rank's box; the parts' own",
    "ShardedWeight keys are not used). Ordinary targets in the same call load as",
    "always. `flexq inspect --json` lists,",
    "per logical tensor, the kept forms it can be loaded in (`kept_forms`).",
    "",
    "The quantization axis is last in every kept form, whatever the logical layout:",
    "N rows (output features) of K elements (input features).",
    "",
    "| form | `values` | `scales` | `global_scale` | value |",
    "|---|---|---|---|---|",
    "| FP8 E4M3, per tensor | float8_e4m3fn `[..., N, K]` | float32 `[]` or `[1]` | None "
    "| values * scale |",
    "| FP8 E4M3, per channel | float8_e4m3fn `[..., N, K]` | float32 `[..., N, 1]` | None "
    "| values * scale of the row |",
    "| FP8 E4M3, block `(bn, bk)` | float8_e4m3fn `[..., N, K]` "
    "| float32 or uint8 E8M0 `[..., ceil(N/bn), ceil(K/bk)]` | None "
    "| values * scale of the block |",
    "| MXFP4 (gpt-oss, compressed-tensors) | uint8 `[..., N, K/2]` "
    "| uint8 E8M0 (or float32) `[..., N, K/32]` | None "
    "| e2m1(code) * 2^(scale - 127) per 32 |",
    "| NVFP4 (ModelOpt, compressed-tensors) | uint8 `[..., N, K/2]` "
    "| float8_e4m3fn (or float32) `[..., N, K/16]` | float32 `[1]` "
    "| e2m1(code) * (float32(scale) * global_scale) per 16 |",
    "",
    "FP4 values hold two E2M1 codes a byte, the first element in the low nibble.",
    "gpt-oss experts (`...experts.gate_up_proj`, `down_proj`) are `[E, in, out]` as",
    "logical tensors, but their kept values are the checkpoint's own `_blocks` bytes",
    "`[E, out, in/2]` (`[E, out, in/32, 16]` merged) and scales `[E, out, in/32]`.",
    "",
    "Scales convert exactly or not at all: F32 is copied; BF16, F16, E8M0 and E4M3",
    "widen to float32 exactly; E8M0 and E4M3 bytes are kept as stored; float32",
    "(ue8m0) scales become uint8 E8M0 only when every one is a power of two in",
    "[2^-127, 2^127]. The block is the checkpoint's own; `block=(bn, bk)` only",
    "broadcasts a per-tensor FP8 scale into a block grid (a per-tensor scale also",
    "broadcasts exactly into `[..., N, 1]`). Anything else is a `TargetError`.",
    "",
    "NVFP4 producers apply the global scale differently: ModelOpt multiplies by",
    "`weight_scale_2` (W = e2m1 * (scale * scale_2)), which is the kept rule, so",
    "`global_scale` is that value as stored. compressed-tensors divides by",
    "`weight_global_scale` g (W = e2m1 * (scale / g)): the kept `global_scale` is",
    "1/g, accepted only when `scale / g == scale * (1/g)` in float32 for every scale",
    "of the shard (g a power of two, in practice), else a `TargetError`: load that",
    "tensor dequantized. auto-round's own NVFP4 format is refused likewise.",
    "ModelOpt's dequantizer decodes code 8 (-0) as +0; the kept byte is unchanged.",
    "",
    "Scales read for a kept target are checked as the dequantizing path checks them",
    "(non-finite scales warn, or fail under `FLEXQ_NONFINITE_SCALES=error`). All",
    "checks of kept and ordinary targets of one call run before the first write, and",
    "kept targets are written last, one at a time: a failure of either kind before",
    "then leaves every target as it was. Kept boxes are read straight from the files",
    "on every engine, each rank only its own blocks.",
    "",
    "### Sharding rules",
    "",
    "Checked before anything is read. A values shard must start on a block boundary",
    "along each blocked axis and end on one or at the tensor's end (vLLM's",
    "`validate_fp8_block_shape` rule): FP8 blocks `(bn, bk)` along N and K; MXFP4",
    "32 elements (16 bytes) and NVFP4 16 elements (8 bytes) along the last axis,",
    "any row along N. Leading axes (stacked experts split along E) need no",
    "alignment. The scales part must hold exactly the blocks covering the values",
    "shard. Otherwise the load is refused with a `TargetError` naming the tensor,",
    "the shard's offset and shape and the block. An aligned shard reads only its",
    "values box and the scale blocks covering it (`LoadReport.bytes_read`).",
    "",
    "### AOA statements",
    "",
    "`aoa_config` statements on logical keys act on the kept pair, through the same",
    "planner (Paddle's AOAEngine) as for dequantized targets: renames, fuses",
    "(`fused_qkv` with its head-group interleave, `fused_ffn`, plain concatenation;",
    "kept weights stay `[out, in]`, so fuse with `axis=0` and no `^T`) move values and",
    "scales together, giving the same layout the dequantized load of the same",
    "statements gives. Every moved box must start on a block boundary in its source",
    "and in the target, and end on one (a partial last block only where both end).",
    "`^T` of an FP8 block weight transposes the values and the scale grid exactly.",
    "Refused with a `TargetError` naming the statement: casts (`dtype=`), transposing",
    "packed FP4 or a per-tensor/per-channel FP8 weight, fusing per-tensor scales or",
    "NVFP4 tensors with different global scales, a box that cuts a block, and",
    "renaming, fusing or transposing gpt-oss experts (kept as stored, `[E, out, in/2]`;",
    "keyed by their own logical name they load beside any statements for other",
    "tensors).",
    "",
    "Not yet kept: INT4 forms (AWQ, GPTQ, compressed-tensors pack).",
]
