"""flexq: load quantized safetensors checkpoints into PaddlePaddle through FlexCheckpoint.

For users: :func:`load_state_dict` and :func:`compose`. For format authors:
:data:`hookimpl`, :class:`LogicalTensor`, :class:`ReadPlan`, :class:`TargetSlice`,
:class:`Checkpoint` and :mod:`flexq.ops`.
"""

from __future__ import annotations

from flexq.checkpoint import Checkpoint
from flexq.compose import ComposedTransform, LogicalEntry, compose
from flexq.errors import (
    CheckpointError,
    FlexqError,
    FormatError,
    PluginError,
    ScaleWarning,
    TargetError,
)
from flexq.header import TensorInfo
from flexq.load import LoadReport, load_state_dict
from flexq.plan import LogicalTensor, ReadPlan, TargetSlice, block_cover
from flexq.plugins import FormatInfo, list_formats, register_format, unregister_format
from flexq.spec import hookimpl
from flexq.writer import RawTensor, save_checkpoint

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
    "RawTensor",
    "ReadPlan",
    "ScaleWarning",
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
