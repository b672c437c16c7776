"""The ``flexq`` command: list-formats, inspect, convert, demo."""

from __future__ import annotations

from flexq.cli.main import main

__all__ = ["main"]
