"""Fixtures for the native-path tests: Paddle's ``load_state_dict`` with ``load_transform=``.

On a Paddle that has it (detected by signature, as flexq does) the tests run
against the real one; on 3.3.1 :mod:`tests.native.upstream` (our stand-in for
upstream's loader) is patched in where flexq looks for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paddle
import pytest
from paddle.distributed.flex_checkpoint.dcp import load_state_dict as lsd

from . import upstream

Loader = Callable[..., None]


def install(target: Any = None) -> Loader:
    """Make Paddle's ``load_state_dict`` the one with ``load_transform`` (the real one if
    this Paddle has it); returns it. ``target`` is a ``monkeypatch`` or None (patch for good)."""
    if upstream.has_load_transform(lsd.load_state_dict):
        return lsd.load_state_dict  # type: ignore[no-any-return]
    setattr_ = target.setattr if target is not None else setattr
    setattr_(lsd, "load_state_dict", upstream.load_state_dict)
    if paddle.distributed.load_state_dict is upstream.PADDLE_LOAD:
        setattr_(paddle.distributed, "load_state_dict", upstream.load_state_dict)
    return upstream.load_state_dict


@pytest.fixture
def paddle_load(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loader]:
    """Paddle's ``load_state_dict`` with ``load_transform=``, installed where flexq looks."""
    level = lsd.logger.level
    lsd.logger.setLevel(logging.WARNING)  # Paddle logs every file it opens at INFO
    loader = install(monkeypatch)
    lsd._metadata_manager.clear()
    try:
        yield loader
    finally:
        lsd._metadata_manager.clear()
        lsd.logger.setLevel(level)


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Names, sizes and modification times of a directory's entries."""
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def symlink_copy(src: Path, dst: Path) -> Path:
    """A directory of symlinks to ``src``'s files (what a caller hands upstream to keep
    its generated metadata out of the checkpoint)."""
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).symlink_to(p.resolve())
    return dst
