"""numpy arrays and Paddle tensors side by side: telling them apart and sharing host memory.

For formats (which get either kind of source) and for the core (which hands
host tensors to numpy without copies). Host Paddle tensors are shared with
numpy through DLPack; device tensors stay where they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def is_paddle(x: object) -> bool:
    """True for a Paddle tensor (checked without importing Paddle)."""
    return type(x).__module__.startswith("paddle")


def on_cpu(x: Any) -> bool:
    """True for numpy arrays and Paddle tensors in host memory."""
    return not is_paddle(x) or bool(x.place.is_cpu_place())


def host_to_numpy(sources: Mapping[str, Any]) -> dict[str, Any]:
    """Sources in host memory as numpy (the fastest CPU path); device tensors stay put."""
    return {k: to_numpy(v) if on_cpu(v) else v for k, v in sources.items()}


def to_numpy(x: Any) -> np.ndarray:
    """A Paddle tensor (or array) as numpy; bfloat16 comes back as uint16 bits.

    Host tensors are shared, not copied (see :func:`host_view`), so treat the
    result as read-only; device tensors are copied to the host.
    """
    if not is_paddle(x):
        return np.asarray(x)
    view = host_view(x) if x.size > 0 else None
    return view if view is not None else np.asarray(x.numpy())


def host_view(x: Any) -> np.ndarray | None:
    """A writable numpy array sharing a host Paddle tensor's memory (bfloat16 as
    uint16 bits), or None for a device tensor or a dtype DLPack does not carry.

    Trainable parameters (``stop_gradient=False``, every LLM weight) are shared
    through their detached alias, which is the same memory.
    """
    import paddle

    if not x.place.is_cpu_place():
        return None
    plain = x.detach()
    view: np.ndarray
    try:
        if plain.dtype == paddle.bfloat16:
            view = np.from_dlpack(plain.view(paddle.int16)).view(np.uint16)
        else:
            view = np.from_dlpack(plain)
    except (BufferError, TypeError, RuntimeError):
        return None
    # numpy before 2.2 marks DLPack arrays read-only; the memory is the tensor's own.
    return view if view.flags.writeable else np.asarray(_Writable(view, x))


class _Writable:
    """The memory of a read-only DLPack array, offered to numpy as writable.

    Keeps the array (and so the tensor behind it) alive as long as numpy's view.
    """

    def __init__(self, view: np.ndarray, tensor: Any) -> None:
        self._keep = (view, tensor)
        self.__array_interface__ = {
            "shape": view.shape,
            "typestr": view.dtype.str,
            "strides": view.strides,
            "data": (view.__array_interface__["data"][0], False),
            "version": 3,
        }
