"""flexq: load quantized safetensors checkpoints into PaddlePaddle through FlexCheckpoint.

For users: :func:`load_state_dict`, :func:`compose` and :func:`verify`. For format authors:
:data:`hookimpl`, :class:`LogicalTensor`, :class:`ReadPlan`, :class:`TargetSlice`,
:class:`Checkpoint` and :mod:`flexq.formatkit`.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from flexq.compose import ComposedTransform, LogicalEntry, compose
from flexq.composition import Composition
from flexq.errors import (
    CheckpointError,
    FlexqError,
    FormatError,
    PluginError,
    ScaleWarning,
    TargetError,
)
from flexq.io.checkpoint import Checkpoint
from flexq.io.header import TensorInfo
from flexq.io.writer import RawTensor, save_checkpoint
from flexq.load.api import load_state_dict
from flexq.load.kept import QuantizedTarget
from flexq.load.report import LoadReport
from flexq.plan import LogicalTensor, ReadPlan, SourceSlice, TargetSlice, block_cover
from flexq.plugin.manager import FormatInfo, list_formats, register_format, unregister_format
from flexq.plugin.spec import hookimpl

if TYPE_CHECKING:
    from flexq.check.api import verify
    from flexq.check.report import VerifyReport

__version__ = "0.1.0"

# Importing Paddle warns "No ccache found" (ccache speeds up compiling C++ extensions);
# loading a checkpoint compiles nothing, so the warning is noise to every flexq user.
# Only this one message, and only when flexq is imported before Paddle.
warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)


def __getattr__(name: str) -> Any:
    # verify's report is a pydantic model: imported on first use, so `import flexq`
    # (every load) does not pay for pydantic.
    if name == "verify":
        from flexq.check.api import verify

        return verify
    if name == "VerifyReport":
        from flexq.check.report import VerifyReport

        return VerifyReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Checkpoint",
    "CheckpointError",
    "ComposedTransform",
    "Composition",
    "FlexqError",
    "FormatError",
    "FormatInfo",
    "LoadReport",
    "LogicalEntry",
    "LogicalTensor",
    "PluginError",
    "QuantizedTarget",
    "RawTensor",
    "ReadPlan",
    "ScaleWarning",
    "SourceSlice",
    "TargetError",
    "TargetSlice",
    "TensorInfo",
    "VerifyReport",
    "block_cover",
    "compose",
    "hookimpl",
    "list_formats",
    "load_state_dict",
    "register_format",
    "save_checkpoint",
    "unregister_format",
    "verify",
]
