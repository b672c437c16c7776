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
from flexq.plugin import passthrough
from flexq.plugin.known import config_methods

if TYPE_CHECKING:
    from flexq.compose import ComposedTransform
    from flexq.plugin.manager import FormatInfo


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Component(_Document):
    """One physical tensor a logical tensor is built from."""

    key: str = Field(description="name of the tensor in the safetensors file")
    dtype: str = Field(description="safetensors dtype string (F8_E4M3, U8, BF16, ...)")
    shape: list[int] = Field(description="shape in header elements")
    file: str = Field(description="the safetensors file that holds it")


class LogicalTensorRow(_Document):
    """One logical tensor: what a load fills, and the components it is decoded from."""

    key: str = Field(description="logical name (what AOA statements and targets use)")
    format: str = Field(description="the format that decodes it, or 'passthrough'")
    shape: list[int]
    dtype: str = Field(description="natural dtype of the dequantized tensor")
    components: list[Component]


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


def unclaimed(ct: ComposedTransform) -> list[str]:
    """Tensors that look quantized yet pass through (composed with ``allow_unclaimed``)."""
    ckpt = ct.checkpoint
    return sorted(
        key
        for key, e in ct.entries.items()
        if e.is_passthrough and passthrough.looks_quantized(key, ckpt.info(key)) is not None
    )


def unclaimed_methods(ct: ComposedTransform, claimed: set[str]) -> list[str]:
    """The config's quantization methods that none of ``claimed`` decodes."""
    return sorted(config_methods(ct.checkpoint.quantization_config) - claimed)


def inspect_document(ct: ComposedTransform) -> InspectDocument:
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
        "`format`, written `compressed-tensors/<format>`) says which format decodes it;",
        "a method no installed format claims is refused (see",
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
    "tensor, a dist tensor or a ShardedWeight (a rank's box). Kept keys are not",
    "renamed by `aoa_config`; ordinary targets in the same call load as always.",
    "",
    "| form | `values` | `scales` | value |",
    "|---|---|---|---|",
    "| FP8 E4M3, per tensor | float8_e4m3fn `[..., N, K]` | float32 `[]` or `[1]` "
    "| values * scale |",
    "| FP8 E4M3, per channel | float8_e4m3fn `[..., N, K]` | float32 `[..., N, 1]` "
    "| values * scale of the row |",
    "| FP8 E4M3, block `(bn, bk)` | float8_e4m3fn `[..., N, K]` "
    "| float32 `[..., ceil(N/bn), ceil(K/bk)]` | values * scale of the block |",
    "",
    "The block is the checkpoint's own; `block=(bn, bk)` only broadcasts a",
    "per-tensor checkpoint scale into a block grid (a per-tensor scale also",
    "broadcasts exactly into `[..., N, 1]`). F32 scales are copied, BF16 and F16",
    "scales widened to float32 (exact); any other conversion is a `TargetError`.",
    "A values shard must start on a block boundary along N and K and end on one or",
    "at the tensor's end (vLLM's `validate_fp8_block_shape` rule), and its scales",
    "part must hold exactly the blocks covering it; otherwise the load is refused",
    "with a `TargetError` naming the tensor, the shard's offset and the block,",
    "before anything is read. An aligned shard reads only its values box and the",
    "scale blocks covering it. Not yet kept: MXFP4, NVFP4 and INT4 forms, E8M0",
    "(ue8m0) scale targets, AOA renames and fuses of kept pairs.",
]
