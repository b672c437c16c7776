"""The report of :func:`flexq.verify`, a pydantic model whose JSON schema is published.

For scripts that read ``flexq verify --json`` (docs/schema/verify.json) and for the
CLI's one-screen summary.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ProblemKind = Literal[
    "missing-shard",
    "truncated-shard",
    "unreadable-shard",
    "stray-shard",
    "duplicate-tensor",
    "index",
    "coverage",
    "scale",
    "layout",
    "corrupt-blob",
    "manifest",
    "deep",
    "against",
]


SplitKind = Literal["column", "row", "expert"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Problem(_Model):
    """One thing wrong with the checkpoint, and what to do about it."""

    kind: ProblemKind
    message: str = Field(description="what is wrong, naming the file and/or tensor")
    fix: str = Field(description="what to do about it")
    file: str | None = Field(default=None, description="the file concerned, if one")


class ShardRow(_Model):
    """One data file the index names (or the directory holds)."""

    file: str
    expected_bytes: int | None = Field(description="the size its header implies (None: unknown)")
    actual_bytes: int | None = Field(description="its size on disk (None: missing)")
    ok: bool


class FormatSummary(_Model):
    """The logical tensors one format (or 'passthrough') builds."""

    format: str
    tensors: int
    stored_bytes: int = Field(description="bytes of their components in the files")


class ScaleCounts(_Model):
    """Counts of suspicious values among the decoded scales of one scale tensor."""

    tensor: str = Field(description="the physical scale tensor")
    logical: str = Field(description="the logical tensor it scales")
    format: str
    values: int
    nan: int
    inf: int
    zero: int
    negative: int
    subnormal: int = Field(description="nonzero values below float32's smallest normal")


class SplitRow(_Model):
    """How one quantized weight splits N ways (--tp / --ep)."""

    tensor: str
    format: str
    split: SplitKind = Field(
        description="column: dim 0 of [out, in] (last of [E, in, out]); row: the in dim; "
        "expert: dim 0 of [E, ...]"
    )
    ways: int
    aligned: bool = Field(
        description="every rank's read plan reads its own blocks (no block read by two ranks)"
    )
    why: str = Field(description="for a split that is not aligned: where it cuts")


class DeepRow(_Model):
    """The decoded boxes of one quantized tensor (--deep), and their comparison with a
    twin (--against)."""

    tensor: str
    format: str
    boxes: list[list[list[int]]] = Field(description="[offset, shape] of each decoded box")
    values: int = Field(description="values decoded")
    nonfinite: int
    min: float | None = Field(description="smallest finite value (None: none finite)")
    max: float | None = Field(description="largest finite value (None: none finite)")
    compared: int = Field(description="--against: values compared with the twin (0: none)")
    differ: int = Field(description="--against: values that differ from the twin's")
    max_abs_diff: float | None = Field(
        description="--against: the largest difference between finite values (None: none compared)"
    )


class Memory(_Model):
    """Estimated bytes of the model's weights after a load."""

    bfloat16: int = Field(description="every logical tensor dequantized to bfloat16")
    float32: int = Field(description="every logical tensor dequantized to float32")
    keep_quantized: int = Field(
        description="quantized tensors as stored (their components' bytes), the rest as stored"
    )


class VerifyReport(_Model):
    """``flexq verify --json``: whether a checkpoint is whole and loadable."""

    path: str = Field(description="the checkpoint directory (a repo id resolved to its snapshot)")
    formats: list[str] = Field(description="the formats that were asked")
    shards: list[ShardRow]
    summary: list[FormatSummary] = Field(description="logical tensors and bytes per format")
    memory: Memory
    scales: list[ScaleCounts] = Field(description="every scale tensor read, with its counts")
    splits: list[SplitRow] = Field(description="--tp / --ep: how quantized weights split")
    deep_mode: Literal["sample", "all"] | None = Field(
        description="--deep: 'sample' (first, middle and last bands) or 'all'; None: not run"
    )
    deep: list[DeepRow] = Field(description="--deep: decoded boxes per quantized tensor")
    against: str | None = Field(description="--against: the dequantized twin compared with")
    tolerance: float | None = Field(
        description="--against: the absolute tolerance (None: compared bit for bit)"
    )
    hashed_bytes: int = Field(description="--sha256: bytes hashed")
    bytes_read: int = Field(description="tensor bytes read from the data files (scales, samples)")
    problems: list[Problem] = Field(description="what is wrong (exit 1 when non-empty)")

    @property
    def ok(self) -> bool:
        return not self.problems
