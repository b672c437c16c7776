"""The exception types flexq raises, for callers who want to catch flexq's errors only.

Every error flexq raises on bad input is a :class:`FlexqError`; the subclasses
say which part of the input was wrong. Messages name the file, tensor, format
or plugin involved so that one line on stderr is enough to act on.
"""

from __future__ import annotations


class FlexqError(Exception):
    """Base class of every error flexq raises on bad input or a failed load."""


class CheckpointError(FlexqError):
    """A checkpoint directory, safetensors file or index is malformed or unsafe."""


class FormatError(FlexqError):
    """A format found tensors it cannot decode (missing scale, wrong grid, bad config)."""


class PluginError(FlexqError):
    """A format plugin failed to load, misbehaved in a hook, or conflicts with another."""


class TargetError(FlexqError):
    """A load target does not match the checkpoint (shape, dtype, missing key)."""


class ScaleWarning(FormatError, UserWarning):
    """A scale is NaN or infinite: the tensor it scales decodes to NaN / inf (corrupt file).

    A warning by default (the values are decoded per the format's definition).
    It is also a :class:`FormatError`, so ``warnings.simplefilter("error",
    ScaleWarning)`` or the environment variable ``FLEXQ_NONFINITE_SCALES=error``
    makes the load fail with it instead, leaving every target unchanged.
    """


class PluginWarning(PluginError, UserWarning):
    """A format plugin was disabled or not loaded, and the other formats go on without it.

    Raised once per plugin and process: when a plugin's hook returned a result of the
    wrong type (the message names the distribution and the hook), when an entry
    point cannot be loaded, or when two distributions offer one format name (the
    message names both; the first-party one is kept). ``warnings.simplefilter("error",
    PluginWarning)`` turns it into an error.
    """
