"""flexq: load quantized safetensors checkpoints into PaddlePaddle through FlexCheckpoint.

For users: :func:`load_state_dict` and :func:`compose`. For format authors:
:data:`hookimpl`, :class:`LogicalTensor`, :class:`ReadPlan`, :class:`TargetSlice`,
:class:`Checkpoint` and :mod:`flexq.formatkit`.
"""

from __future__ import annotations

from flexq.compose import ComposedTransform, LogicalEntry, compose
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

__version__ = "0.1.0"

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "ComposedTransform",
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
    "block_cover",
    "compose",
    "hookimpl",
    "list_formats",
    "load_state_dict",
    "register_format",
    "save_checkpoint",
    "unregister_format",
]
