"""Each format package's own dequantize bench (``packages/format-*/bench/bench_*.py``).

Every such module has ``measure() -> dict[str, float]`` returning GB/s of
float32 output for its layouts and for a memcpy of the same bytes, measured
in alternating rounds inside that call; a module may also have
``measure_memory() -> dict[str, Any]``, the memory of a load of its own
(``peak_extra_rss`` above the targets, ``bound_bytes``, ``within_bound``).
They are imported by path: the bench directories are not packages.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def bench_modules() -> dict[str, Path]:
    """Format package name (``format-fp8``) -> its bench module file."""
    return {p.parents[1].name: p for p in sorted(ROOT.glob("packages/format-*/bench/bench_*.py"))}


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"flexq_bench_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def selected(names: Sequence[str] | None = None) -> dict[str, Path]:
    """:func:`bench_modules`, only those of the packages ``names`` (all when None or
    empty), for a run of a few formats' benches (``run.py decoders --packages ...``).

    :raises ValueError: naming the unknown packages and the known ones.
    """
    modules = bench_modules()
    if not names:
        return modules
    unknown = sorted(set(names) - set(modules))
    if unknown:
        raise ValueError(
            f"no bench for {', '.join(unknown)}; format packages with one: {', '.join(modules)}"
        )
    return {name: path for name, path in modules.items() if name in names}


def measure_all(names: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Package name -> that package's ``measure()`` figures (GB/s), for every package
    or the packages ``names``."""
    results = {}
    for name, path in selected(names).items():
        figures = _load(path).measure()
        results[name] = {k: float(v) for k, v in figures.items()}
    return results


def memory_all() -> dict[str, dict[str, Any]]:
    """Package name -> its ``measure_memory()`` figures, for the modules that have one."""
    results = {}
    for name, path in bench_modules().items():
        module = _load(path)
        if hasattr(module, "measure_memory"):
            results[name] = module.measure_memory()
    return results
